// Rollscope front-end: draws the Plotly figures embedded as JSON and makes chart points drill
// down to their rollouts. No inline scripts (the CSP forbids them); trace text never reaches here.
(function () {
  "use strict";

  function draw(plot, spec) {
    plot.dataset.drawn = "1";
    Plotly.newPlot(plot, spec.data, spec.layout, {displaylogo: false, responsive: true});
    plot.on("plotly_click", function (ev) {
      var p = ev.points && ev.points[0];
      if (p && typeof p.customdata === "string" && p.customdata.charAt(0) === "/") {
        window.location.href = p.customdata;
      }
    });
  }

  function drawFigures(root) {
    if (typeof Plotly === "undefined") return;
    // figures embedded in the page as JSON
    root.querySelectorAll("figure[data-figure]").forEach(function (fig) {
      var src = document.getElementById(fig.dataset.figure);
      var plot = fig.querySelector(".plot");
      if (!src || !plot || plot.dataset.drawn) return;
      draw(plot, JSON.parse(src.textContent));
    });
    // figures fetched from a chart's JSON twin (the run page: it stays light at any run size)
    root.querySelectorAll("figure[data-src]").forEach(function (fig) {
      var plot = fig.querySelector(".plot");
      if (!plot || plot.dataset.drawn) return;
      plot.dataset.drawn = "loading";
      fetch(fig.dataset.src, {headers: {"Accept": "application/json"}})
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
        .then(function (d) {
          if (!d.figure.data.length) { fig.classList.add("empty-chart"); }
          draw(plot, d.figure);
        })
        .catch(function () { plot.textContent = "This chart could not be loaded."; });
    });
  }

  // Filter forms leave their empty fields out of the URL: a shared link names only what is set.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.matches || !form.matches("form[data-drop-empty]")) return;
    form.querySelectorAll("input[name], select[name]").forEach(function (el) {
      if (el.value === "") el.disabled = true;
    });
    // re-enable after the navigation starts, so Back shows the form as it was
    setTimeout(function () {
      form.querySelectorAll("[disabled]").forEach(function (el) { el.disabled = false; });
    }, 0);
  });

  document.addEventListener("DOMContentLoaded", function () { drawFigures(document); });
  document.addEventListener("htmx:afterSettle", function (ev) { drawFigures(ev.target); });
})();
