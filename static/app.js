// Rollscope front-end: draws the Plotly figures embedded as JSON and makes chart points drill
// down to their rollouts. No inline scripts (the CSP forbids them); trace text never reaches here.
(function () {
  "use strict";

  function drawFigures(root) {
    if (typeof Plotly === "undefined") return;
    root.querySelectorAll("figure[data-figure]").forEach(function (fig) {
      var src = document.getElementById(fig.dataset.figure);
      var plot = fig.querySelector(".plot");
      if (!src || !plot || plot.dataset.drawn) return;
      var spec = JSON.parse(src.textContent);
      plot.dataset.drawn = "1";
      Plotly.newPlot(plot, spec.data, spec.layout, {displaylogo: false, responsive: true});
      plot.on("plotly_click", function (ev) {
        var p = ev.points && ev.points[0];
        if (p && typeof p.customdata === "string" && p.customdata.charAt(0) === "/") {
          window.location.href = p.customdata;
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { drawFigures(document); });
  // A live page (a run receiving rollouts) swaps in fresh content every 2 s: draw its figures.
  document.addEventListener("htmx:afterSettle", function (ev) { drawFigures(ev.target || document); });
})();
