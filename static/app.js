// Rollscope front-end, what htmx does not do: draws the Plotly figures embedded as JSON and makes
// chart points drill down to their rollouts; on the rollout page, the token overlays, token
// details on hover or focus, the reader's place kept while htmx loads windows of long token
// strips and further messages, deep links (#m-N, #t-N) to anything in the rollout, and the
// keyboard. No inline scripts (the CSP forbids them); trace text is only ever set as
// textContent, never parsed as HTML here (fragments come from the server, escaped by its
// templates, and htmx swaps them).
(function () {
  "use strict";

  // --- charts -------------------------------------------------------------------------------
  // The server sends each chart as Plotly figure data (app/charts.py); what is drawn is prepared
  // here from it, the same way on first draw, on a live redraw (static/live.js calls
  // RollscopeCharts.react) and when the page's chart controls change:
  // - the error-policy switch (one per page): a trace tagged `meta.policy` is shown only under the
  //   chosen policy, instead of every series drawn twice;
  // - smoothing, TensorBoard's: its scalar dashboard's debiased exponential moving average
  //   (TensorBoard's tensorboard/components/vz_line_chart2/line-chart.ts, resmoothDataset; W&B's
  //   "exponential moving average - TensorBoard" is the same),
  //     last = last·w + (1 − w)·y;  n += 1;  smoothed = last / (1 − wⁿ)
  //   over the finite points in step order (last starts at 0; 1 − wⁿ undoes the pull towards that
  //   0; a constant series is left as it is), w the slider's weight in [0, 0.99]; the raw series
  //   stays behind the smoothed one, faint, out of the legend and the hover;
  // - a series this run did not record (`meta.empty`, app.charts.mark_empty) is named so in the
  //   legend and left out of the plot;
  // - the height: the plot area (Plotly's _fullLayout._size.h) is raised to its floor, 300 px on
  //   a chart's page and 220 px in a grid of charts, whatever room the legend and axes take.
  var POLICY_KEY = "rollscope-error-policy", SMOOTH_KEY = "rollscope-smoothing";
  var PLOT_CONFIG = {displaylogo: false, responsive: true, displayModeBar: true,
                     modeBarButtonsToRemove: ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"]};

  function stored(key, dflt) {
    try { var v = localStorage.getItem(key); return v === null ? dflt : v; } catch (err) { return dflt; }
  }
  function store(key, v) { try { localStorage.setItem(key, v); } catch (err) { /* private mode */ } }
  function policy() { return stored(POLICY_KEY, "errors_as_zero"); }
  function smoothing() {
    var w = parseFloat(stored(SMOOTH_KEY, "0"));
    return isFinite(w) && w > 0 ? Math.min(w, 0.99) : 0;
  }

  function ema(ys, w) {
    var finite = ys.filter(function (y) { return typeof y === "number" && isFinite(y); });
    var constant = finite.every(function (y) { return y === finite[0]; });
    var last = 0, n = 0;
    return ys.map(function (y) {
      if (constant || typeof y !== "number" || !isFinite(y)) return y;
      last = last * w + (1 - w) * y;
      n += 1;
      return last / (1 - Math.pow(w, n));
    });
  }

  function isGrid(plot) { return !plot.closest(".charts.single"); }

  function prepare(plot, spec) {
    var chosen = policy(), w = smoothing();
    var meta = (spec.layout && spec.layout.meta) || {};
    var raws = [], data = [];
    spec.data.forEach(function (t0) {
      var m = t0.meta || {};
      var t = Object.assign({}, t0);
      if (m.policy) t.visible = m.policy === chosen ? (t0.visible === false ? true : t0.visible) : false;
      if (m.legend) t.name = m.legend;  // a band's one legend entry ("p10–p90 (errors scored 0)")
      if (m.empty && !meta.empty) {
        t.name = t.name + " · not recorded in this run";
        if (t.visible !== false) t.visible = "legendonly";
      }
      var line = t.type === "scatter" && String(t.mode || "").indexOf("lines") >= 0;
      if (w && line && !m.empty) {
        if (!(t.line && t.line.width === 0)) {
          raws.push(Object.assign({}, t, {name: t.name + " (raw)", showlegend: false, hoverinfo: "skip",
                                          hovertemplate: null, opacity: 0.25, fill: "none",
                                          legendgroup: t.legendgroup || "raw " + t.name}));
          t.legendgroup = t.legendgroup || "raw " + t.name;
        }
        t.y = ema(t.y || [], w);
        if (t.hovertemplate) t.hovertemplate = "smoothed " + t.hovertemplate;
      }
      data.push(t);
    });
    // a taller figure stays so (the task heatmap grows with its rows)
    var height = meta.empty ? 150 : Math.max(isGrid(plot) ? 380 : 480, (spec.layout && spec.layout.height) || 0);
    var layout = Object.assign({}, spec.layout, {uirevision: "live", height: height});
    if (meta.empty) layout.showlegend = false;
    return {data: raws.concat(data), layout: layout};
  }

  // The plot area at least its floor, and the legend whole: raise the figure's height by what is
  // missing. Plotly caps a legend below the plot at the plot area's height and scrolls the rest
  // (compare with many runs), so the plot area must also be as tall as the legend; a few rounds,
  // since the legend's room changes with the height. `data-sized` says it is done (the layout
  // test waits for it).
  function ensureFloor(plot, empty, rounds) {
    var fl = plot._fullLayout;
    var floor = isGrid(plot) ? 220 : 300;
    var done = function () { plot.dataset.sized = "1"; };
    if (empty || !fl || !fl._size) return done();
    var lg = fl.legend || {}, full = lg._height || 0, shown = lg._effHeight || full;
    var target = Math.max(floor, full);
    var grow = Math.max(0, target - fl._size.h) + Math.max(0, full - shown);
    if (grow < 1 || (rounds || 0) >= 3) return done();
    return Promise.resolve(Plotly.relayout(plot, {height: fl.height + Math.ceil(grow)})).then(function () {
      return ensureFloor(plot, empty, (rounds || 0) + 1);
    });
  }

  // The PNG download (the modebar's camera) is named after the run and the chart
  // (`layout.meta.filename`, app.charts.figure), else the figure's chart id.
  function config(plot, spec) {
    var fig = plot.closest("figure");
    var meta = (spec && spec.layout && spec.layout.meta) || {};
    var name = meta.filename || (fig && (fig.dataset.chart || fig.id)) || "chart";
    return Object.assign({toImageButtonOptions: {format: "png", filename: name.replace(/^chart-/, ""), scale: 2}},
                         PLOT_CONFIG);
  }

  // Under `hovermode: x unified` a click reports every series at the step: the one clicked is the
  // bar segment under the pointer (stacks summed in trace order), else the nearest line.
  function clicked(plot, ev) {
    var pts = (ev.points || []).slice().sort(function (a, b) { return a.curveNumber - b.curveNumber; });
    if (pts.length < 2 || !ev.event) return pts[0];
    var fl = plot._fullLayout, box = plot.getBoundingClientRect();
    var y = ev.event.clientY - box.top - fl._size.t;
    var best = pts[0], bestD = Infinity, stacks = {};
    pts.forEach(function (p) {
      if (!p.yaxis || typeof p.y !== "number") return;
      var lo = p.y, hi = p.y, d;
      if (p.data.type === "bar") {
        var k = p.yaxis._id + "/" + (p.data.offsetgroup || "");
        var base = Array.isArray(p.data.base) ? p.data.base[p.pointIndex] : null;  // compare's stacks
        lo = typeof base === "number" ? base : fl.barmode === "stack" ? (stacks[k] || 0) : 0;
        hi = lo + p.y;
        if (fl.barmode === "stack") stacks[k] = hi;
      }
      var a = p.yaxis.l2p(lo), b = p.yaxis.l2p(hi);
      d = (y >= Math.min(a, b) && y <= Math.max(a, b)) ? 0 : Math.min(Math.abs(y - a), Math.abs(y - b));
      if (d < bestD) { best = p; bestD = d; }
    });
    return best;
  }

  function clickTarget(p) {
    var m = p && p.data && p.data.meta;
    if (m && typeof m.steps === "string" && m.steps.charAt(0) === "/") return m.steps + encodeURIComponent(p.x);
    if (p && typeof p.customdata === "string" && p.customdata.charAt(0) === "/") return p.customdata;
    return null;
  }

  function react(plot, spec, first) {
    plot._rollscope = spec;
    delete plot.dataset.sized;
    var ready = prepare(plot, spec);
    var fig = plot.closest("figure");
    var empty = !!(spec.layout && spec.layout.meta && spec.layout.meta.empty) || !spec.data.length;
    if (fig) fig.classList.toggle("empty-chart", empty);
    var done = (first ? Plotly.newPlot : Plotly.react)(plot, ready.data, ready.layout, config(plot, spec));
    return Promise.resolve(done).then(function () { ensureFloor(plot, empty); });
  }

  function draw(plot, spec) {
    plot.dataset.drawn = "1";
    // uirevision: a live page's Plotly.react with new data keeps the reader's zoom and hidden series (static/live.js)
    react(plot, spec, true);
    plot.on("plotly_click", function (ev) {
      var url = clickTarget(clicked(plot, ev));
      if (url) window.location.href = url;
    });
  }

  function redrawAll() {
    document.querySelectorAll("figure.chart .plot").forEach(function (plot) {
      if (plot.dataset.drawn === "1" && plot._rollscope) react(plot, plot._rollscope);
    });
  }

  // The page's chart controls (templates/_charts.html `chart_controls`), kept in localStorage.
  function initChartControls() {
    document.querySelectorAll(".chart-controls").forEach(function (box) {
      box.hidden = false;
      box.querySelectorAll("button[data-policy]").forEach(function (b) {
        b.setAttribute("aria-pressed", String(b.dataset.policy === policy()));
        b.addEventListener("click", function () {
          store(POLICY_KEY, b.dataset.policy);
          document.querySelectorAll("button[data-policy]").forEach(function (o) {
            o.setAttribute("aria-pressed", String(o.dataset.policy === b.dataset.policy));
          });
          redrawAll();
        });
      });
      var slider = box.querySelector("input.ema");
      var out = box.querySelector("output");
      if (!slider) return;
      slider.value = String(smoothing());
      if (out) out.textContent = smoothing().toFixed(2);
      slider.addEventListener("input", function () {
        store(SMOOTH_KEY, slider.value);
        if (out) out.textContent = parseFloat(slider.value).toFixed(2);
        redrawAll();
      });
    });
  }

  window.RollscopeCharts = {react: react, prepare: prepare, ema: ema};

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
        .then(function (d) { draw(plot, d.figure); })
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

  // --- fragments ------------------------------------------------------------------------------
  // htmx fetches and swaps every HTML fragment (hx-get on the placeholders: token windows, earlier
  // and later messages; the server renders the page's `messages` block for an HX-Request). What
  // htmx does not do is done here: keep the reader's place when content arrives above it, and
  // run a step once a fragment is in (a deep link's window, `j` past the last message).

  var after = [];  // {target, fn}: call fn once target's fragment is swapped in

  function loadNow(el, fn) {
    var target = el.classList.contains("tok-window") ? el : el.closest(".load-more, .load-earlier");
    var link = target === el ? el : target.querySelector("[hx-get]");
    if (!target || !link || typeof htmx === "undefined") return;
    if (fn) after.push({target: target, fn: fn});
    htmx.trigger(link, "load-now");
  }

  document.addEventListener("htmx:beforeSwap", function (ev) {
    var el = ev.detail.target;
    if (!el || !el.classList) return;
    if (el.classList.contains("tok-window")) {
      // A window that fills in before what the reader looks at must not push it away: the
      // highlighted token (a deep link's), else the chip after a window above the strip's
      // visible top, stays where it was (the placeholder cannot anchor the scroll: it goes).
      var strip = el.closest(".tokens");
      if (!strip) return;
      var anchor = null;
      var seen = strip.querySelector(".tok.target, .tok.active");
      if (seen) anchor = el.compareDocumentPosition(seen) & Node.DOCUMENT_POSITION_FOLLOWING ? seen : null;
      else if (el.getBoundingClientRect().top < strip.getBoundingClientRect().top) anchor = el.nextElementSibling;
      if (!anchor) return;
      var y0 = anchor.getBoundingClientRect().top;
      after.push({target: el, fn: function () { strip.scrollTop += anchor.getBoundingClientRect().top - y0; }});
    } else if (el.classList.contains("load-earlier")) {
      var before = document.documentElement.scrollHeight;  // keep what the reader was looking at in place
      after.push({target: el, fn: function () {
        window.scrollBy(0, document.documentElement.scrollHeight - before);
      }});
    }
  });

  document.addEventListener("htmx:afterSwap", function (ev) {
    var t = ev.detail.target;
    var due = after.filter(function (a) { return a.target === t; });
    if (!due.length) return;
    after = after.filter(function (a) { return a.target !== t; });
    due.forEach(function (a) { a.fn(); });
  });

  // --- token details --------------------------------------------------------------------------

  // The seven token states as app/views/tokens.py words them, from the legend's JSON (#token-states).
  var STATES = null;

  function stateOf(el) {
    if (STATES === null) {
      var src = document.getElementById("token-states");
      try { STATES = src ? JSON.parse(src.textContent) : []; } catch (err) { STATES = []; }
    }
    for (var k = 0; k < STATES.length; k++) {
      if (el.classList.contains("tok-" + STATES[k].key)) return STATES[k].label + ": " + STATES[k].text;
    }
    return "";
  }

  function showToken(el) {
    var panel = document.getElementById("tokinfo");
    if (!panel || !el) return;
    var d = el.dataset;
    var lines = [el.id.replace("-", "") + " · #" + d.i + " in its message · id " + d.id, stateOf(el),
                 d.oov ? "not in the tokenizer (" + d.oov + " ids)" : "piece " + JSON.stringify(el.textContent)];
    if (d.raw) lines.push("byte-level piece " + JSON.stringify(d.raw));
    if (d.hex) lines.push("bytes " + d.hex);
    else if (d.id !== "-1" && el.title.indexOf("bytes lost") >= 0) lines.push("bytes lost upstream (U+FFFD)");
    lines.push("logprob " + (d.lp !== undefined ? d.lp : (d.lpb === "-1" ? "missing" : "none (context, by design)")));
    if (d.adv !== undefined) lines.push("advantage " + d.adv);
    if (d.delta !== undefined) lines.push("trainer − inference Δ " + d.delta + " · ratio " + d.ratio);
    panel.textContent = lines.join("\n");
    panel.hidden = false;
  }

  function activate(el) {
    var prev = document.querySelector(".tok.active");
    if (prev) { prev.classList.remove("active"); prev.removeAttribute("tabindex"); }
    el.classList.add("active");
    el.setAttribute("tabindex", "-1");
    el.focus({preventScroll: false});
    showToken(el);
  }

  // --- deep links -----------------------------------------------------------------------------

  function target(hash) {
    var m = /^#(m|node|t)-(\d+)$/.exec(hash || "");
    if (!m) return null;
    var kind = m[1] === "t" ? "t" : "m";
    return {kind: kind, n: parseInt(m[2], 10), id: kind + "-" + m[2]};
  }

  function highlight(el) {
    document.querySelectorAll(".target").forEach(function (x) { x.classList.remove("target"); });
    el.classList.add("target");
    el.scrollIntoView({block: "center"});
    if (el.classList.contains("tok")) activate(el);
  }

  function goToHash() {
    var tg = target(location.hash);
    if (!tg || !document.getElementById("messages")) return;
    var el = document.getElementById(tg.id);
    if (el) { highlight(el); return; }
    if (tg.kind === "t") {
      var w = Array.prototype.find.call(document.querySelectorAll(".tok-window"), function (x) {
        return +x.dataset.t0 <= tg.n && tg.n < +x.dataset.t1;
      });
      if (w) { loadNow(w, goToHash); return; }
    }
    // not on this page: ask the server for the page that holds it (once)
    var u = new URL(location.href);
    var want = tg.kind + "-" + tg.n;
    if (u.searchParams.get("focus") === want) return;
    u.searchParams.set("focus", want);
    u.searchParams.delete("offset");
    location.replace(u.toString());
  }

  // --- keyboard -------------------------------------------------------------------------------

  function messageStep(dir) {
    var msgs = document.querySelectorAll("article.msg");
    if (!msgs.length) return;
    var pick = null;
    if (dir > 0) {
      pick = Array.prototype.find.call(msgs, function (m) { return m.getBoundingClientRect().top > 8; });
      if (!pick) {
        var more = document.querySelector(".load-more");
        if (more) { loadNow(more, function () { messageStep(1); }); return; }
      }
    } else {
      for (var i = msgs.length - 1; i >= 0; i--) {
        if (msgs[i].getBoundingClientRect().top < -8) { pick = msgs[i]; break; }
      }
    }
    if (!pick) return;
    pick.scrollIntoView({block: "start"});
    pick.focus({preventScroll: true});
    history.replaceState(null, "", "#" + pick.id);
  }

  function go(url) { if (url) window.location.href = url; }

  function onKey(e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA" || t.isContentEditable)) return;
    var dlg = document.getElementById("keys");
    var nav = document.querySelector("nav.branches");
    var head = document.querySelector("section.head");
    var list = document.querySelector("nav.list-nav");
    if ((e.key === "ArrowRight" || e.key === "ArrowLeft") && t && t.closest && t.closest(".tokens")) {
      var cur = t.classList.contains("tok") ? t : t.querySelector(".tok");
      if (!cur) return;
      var next = e.key === "ArrowRight" ? cur.nextElementSibling : cur.previousElementSibling;
      if (cur !== t) next = cur;
      if (next && next.classList.contains("tok")) { e.preventDefault(); activate(next); }
      return;
    }
    switch (e.key) {
      case "j": messageStep(1); break;
      case "k": messageStep(-1); break;
      case "[": go(nav && nav.dataset.prev); break;
      case "]": go(nav && nav.dataset.next); break;
      case "g": go(head && head.dataset.group); break;
      case "n": go(list && list.dataset.next); break;
      case "p": go(list && list.dataset.prev); break;
      case "?": if (dlg && dlg.showModal) { if (dlg.open) dlg.close(); else dlg.showModal(); } break;
      default: return;
    }
    e.preventDefault();
  }

  // --- small things ---------------------------------------------------------------------------

  function initOverlay() {
    var radios = document.querySelectorAll('input[name="overlay"]');
    if (!radios.length) return;
    function set(v) {
      if (v) document.body.dataset.overlay = v; else delete document.body.dataset.overlay;
      try { localStorage.setItem("rollscope-overlay", v); } catch (err) { /* private mode */ }
    }
    var saved = "";
    try { saved = localStorage.getItem("rollscope-overlay") || ""; } catch (err) { saved = ""; }
    radios.forEach(function (r) {
      if (r.value === saved) { r.checked = true; set(saved); }
      r.addEventListener("change", function () { if (r.checked) set(r.value); });
    });
  }

  function initSort() {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      table.querySelectorAll("th").forEach(function (th, col) {
        th.style.cursor = "pointer";
        th.title = "sort";
        th.addEventListener("click", function () {
          var body = table.tBodies[0];
          var dir = th.dataset.dir === "desc" ? 1 : -1;
          th.dataset.dir = dir === 1 ? "asc" : "desc";
          var rows = Array.prototype.slice.call(body.rows);
          rows.sort(function (a, b) {
            var x = parseFloat(a.cells[col].textContent), y = parseFloat(b.cells[col].textContent);
            if (isNaN(x)) x = -Infinity;
            if (isNaN(y)) y = -Infinity;
            if (th.dataset.abs) { x = Math.abs(x); y = Math.abs(y); }
            return (x - y) * dir;
          });
          rows.forEach(function (r) { body.appendChild(r); });
        });
      });
    });
  }

  function initFullText() {
    document.addEventListener("click", function (e) {
      var a = e.target.closest && e.target.closest("a.show-full");
      if (!a) return;
      var pre = a.closest("article") && a.closest("article").querySelector("pre.content");
      if (!pre) return;
      e.preventDefault();
      a.textContent = "loading…";
      fetch(a.href).then(function (r) { return r.text(); }).then(function (text) {
        pre.textContent = text;  // the same layout, in the app; never parsed as HTML
        a.parentNode.remove();
      });
    });
  }

  function initRollout() {
    var messages = document.getElementById("messages");
    if (!messages) return;
    messages.addEventListener("mouseover", function (e) {
      var el = e.target.closest && e.target.closest(".tok");
      if (el) showToken(el);
    });
    messages.addEventListener("focusin", function (e) {
      var el = e.target.closest && e.target.closest(".tok");
      if (el) showToken(el);
    });
    window.addEventListener("hashchange", goToHash);
    goToHash();
  }

  document.addEventListener("DOMContentLoaded", function () {
    initChartControls();
    drawFigures(document);
    initOverlay();
    initSort();
    initFullText();
    initRollout();
    document.addEventListener("keydown", onKey);
  });
  // a fragment htmx swapped in may hold figures
  document.addEventListener("htmx:afterSettle", function (ev) { drawFigures(ev.target || document); });
})();
