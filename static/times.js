// Times on the pages are printed by the server as <time datetime="...Z" title="exact UTC">3 min
// ago</time> (app/render.py `ago`). While a page stays open this keeps the words current, once a
// minute and after htmx swaps a fragment in, with the same wording as the server's.
(function () {
  "use strict";
  var UNITS = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];

  function words(then, now) {
    var seconds = (now - then) / 1000, s = Math.abs(seconds);
    if (s < 5) return "just now";
    if (s >= 60 * 86400) return new Date(then).toISOString().slice(0, 10);
    for (var i = 0; i < UNITS.length; i++) {
      if (s >= UNITS[i][1]) {
        var n = Math.floor(s / UNITS[i][1]) + " " + UNITS[i][0];
        return seconds < 0 ? "in " + n : n + " ago";
      }
    }
    return "just now";
  }

  function refresh(root) {
    var now = Date.now();
    (root || document).querySelectorAll("time[datetime][title]").forEach(function (el) {
      var then = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(then)) el.textContent = words(then, now);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    refresh(document);
    window.setInterval(function () { refresh(document); }, 60000);
  });
  document.addEventListener("htmx:afterSettle", function (ev) { refresh(ev.target || document); });
})();
