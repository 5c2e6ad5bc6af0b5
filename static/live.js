// Live pages (the run page, the rollouts list, the step in progress, /ingest): listen to the
// server's change events (an EventSource on the page's `data-events`; app/routes/events.py) and,
// on each, fetch what the page shows ONCE (`data-fragments`) and morph it in place by element id
// (idiomorph, vendored): scroll position, focus, typed text, open <details> and selections stay.
// Charts the event names are redrawn with Plotly.react on the same layout (`uirevision`), so
// zoom and hidden series stay; those off screen when they change are fetched when they come into view. Nothing is requested while nothing changes: the event stream is
// the only connection. "pause live updates" (kept in localStorage) closes the stream; resuming
// catches up at once. Fragments are the server's own autoescaped templates; no trace text is
// ever handled here as HTML.
(function () {
  "use strict";

  var PAUSE_KEY = "rollscope-live-paused";
  var MORPH = {
    morphStyle: "outerHTML",
    ignoreActiveValue: true,  // the focused field keeps what is typed in it
    callbacks: {
      // a <details> the reader opened or closed stays so
      beforeAttributeUpdated: function (name, node) { return !(name === "open" && node.tagName === "DETAILS"); }
    }
  };

  var root = null;       // p#live: the page's live settings in data-*
  var source = null;     // the EventSource, while not paused
  var pending = null;    // events not yet applied (merged while a fetch is in flight)
  var busy = false;
  var stats = {events: 0, applied: 0, fetches: 0};
  var opened = 0;        // connections of the event stream so far

  function paused() {
    try { return localStorage.getItem(PAUSE_KEY) === "1"; } catch (err) { return false; }
  }

  function setState(text) {
    var el = document.getElementById("live-state");
    if (el) el.textContent = text;
  }

  // the page's own query (steps=, smooth=, the list's filters) carried to its fragments' URL
  function withQuery(url, extra) {
    var u = new URL(url, location.href);
    var keep = (root.dataset.query || "").split(" ").filter(Boolean);
    new URLSearchParams(location.search).forEach(function (v, k) {
      if (keep.indexOf("*") >= 0 || keep.indexOf(k) >= 0) u.searchParams.set(k, v);
    });
    Object.keys(extra || {}).forEach(function (k) { u.searchParams.set(k, extra[k]); });
    return u.toString();
  }

  function getJSON(url) {
    stats.fetches++;
    return fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    });
  }

  // --- applying what the server sent ----------------------------------------------------------

  function fragmentNode(html) {
    // The server's rendered (escaped) fragment, parsed inert; a <template> also takes a <tbody>.
    var t = document.createElement("template");
    t.innerHTML = html;
    return t.content.firstElementChild ? t.content : null;
  }

  function morph(fragments) {
    Object.keys(fragments || {}).forEach(function (id) {
      var el = document.getElementById(id);
      var content = fragmentNode(fragments[id]);
      var fresh = content && (content.getElementById ? content.getElementById(id) : content.querySelector("#" + CSS.escape(id)));
      if (!el || !fresh) return;
      Idiomorph.morph(el, fresh, MORPH);
    });
  }

  function redraw(figures) {
    if (typeof Plotly === "undefined") return;
    Object.keys(figures || {}).forEach(function (id) {
      var fig = document.querySelector('figure[data-chart="' + CSS.escape(id) + '"]');
      var plot = fig && fig.querySelector(".plot");
      if (!plot || plot.dataset.drawn !== "1") return;  // not drawn yet: app.js draws it with the new data
      // drawn as app.js draws it (the page's error policy, smoothing and height; uirevision kept)
      window.RollscopeCharts.react(plot, figures[id]);
    });
  }

  function chartsOnPage() {
    var ids = {};
    document.querySelectorAll("figure[data-chart]").forEach(function (f) { ids[f.dataset.chart] = true; });
    return ids;
  }

  // --- one view each --------------------------------------------------------------------------

  // Charts off screen are not fetched or redrawn on a change: they are marked stale and fetched
  // together, once, when they scroll into view.
  var inView = {};
  var stale = {};
  var watcher = null;

  function watchCharts() {
    if (typeof IntersectionObserver === "undefined") return;
    watcher = new IntersectionObserver(function (entries) {
      var due = [];
      entries.forEach(function (en) {
        var id = en.target.dataset.chart;
        inView[id] = en.isIntersecting;
        if (en.isIntersecting && stale[id]) { due.push(id); delete stale[id]; }
      });
      if (due.length && !paused()) {
        getJSON(withQuery(root.dataset.fragments, {charts: due.join(","), fragments: "0"}))
          .then(function (d) { redraw(d.figures); })
          .catch(function () { due.forEach(function (id) { stale[id] = true; }); });
      }
    }, {rootMargin: "200px 0px"});
    document.querySelectorAll("figure[data-chart]").forEach(function (f) { watcher.observe(f); });
  }

  var VIEWS = {
    run: function (ev) {
      var on = chartsOnPage();
      var want = (ev.charts || []).filter(function (c) {
        if (!on[c]) return false;
        if (watcher && !inView[c]) { stale[c] = true; return false; }
        return true;
      });
      var t0 = performance.now();
      return getJSON(withQuery(root.dataset.fragments, want.length ? {charts: want.join(",")} : {}))
        .then(function (d) {
          var t1 = performance.now();
          morph(d.fragments);
          var t2 = performance.now();
          redraw(d.figures);
          stats.ms = {fetch: t1 - t0, morph: t2 - t1, charts: performance.now() - t2};
          root.dataset.version = d.version;
        });
    },
    rollouts: function () {
      return getJSON(withQuery(root.dataset.fragments)).then(function (d) {
        var shown = parseInt(root.dataset.total, 10) || 0;
        var btn = document.getElementById("live-new");
        var n = d.total - shown;
        if (btn && n > 0) {
          btn.textContent = n.toLocaleString() + (d.total_capped ? "+" : "") + " new rollout" + (n === 1 ? "" : "s") +
            " — show";
          btn.hidden = false;
        }
      });
    },
    step: function (ev) {
      var step = parseInt(root.dataset.step, 10);
      var mine = (ev.changed_steps || []).indexOf(step) >= 0 || (ev.new_steps || []).length > 0;
      if (!mine) return null;
      return getJSON(root.dataset.fragments).then(function (d) { morph(d.fragments); });
    },
    ingest: function () {
      return getJSON(root.dataset.fragments).then(function (d) { morph(d.fragments); });
    }
  };

  function showNewRows() {
    var btn = document.getElementById("live-new");
    getJSON(withQuery(root.dataset.fragments, {rows: "1"})).then(function (d) {
      morph(d.fragments);
      root.dataset.total = d.total;
      if (btn) btn.hidden = true;
    }).catch(function () { setState("could not load the new rollouts"); });
  }

  // Events that come while a fetch is in flight are merged: the next fetch asks for all of it.
  function merge(a, b) {
    if (!a) return b;
    var out = Object.assign({}, a, b);
    ["charts", "changed_steps", "new_steps"].forEach(function (k) {
      var seen = {};
      out[k] = (a[k] || []).concat(b[k] || []).filter(function (x) {
        var key = String(x);
        if (seen[key]) return false;
        seen[key] = true;
        return true;
      });
    });
    return out;
  }

  function drain() {
    if (busy || !pending || paused()) return;
    var ev = pending;
    pending = null;
    busy = true;
    var work = VIEWS[root.dataset.view](ev);
    if (!work) { busy = false; return; }
    work.then(function () {
      stats.applied++;
      root.dataset.applied = stats.applied;
      setState("live");
    }, function () {
      setState("update failed; waiting for the next change");
    }).then(function () { busy = false; drain(); });
  }

  function onChange(msg) {
    var ev;
    try { ev = JSON.parse(msg.data); } catch (err) { return; }
    stats.events++;
    root.dataset.events = stats.events;
    if (ev.event === "gone") { setState("this run was deleted"); stop(); return; }
    pending = merge(pending, ev);
    drain();
  }

  // --- the stream -----------------------------------------------------------------------------

  function start() {
    if (source || paused()) return;
    var url = new URL(root.dataset.events, location.href);
    if (root.dataset.version) url.searchParams.set("since", root.dataset.version);
    source = new EventSource(url.toString());
    source.addEventListener("run", onChange);
    source.addEventListener("ingest", onChange);
    source.addEventListener("gone", onChange);
    source.onopen = function () {
      setState("live");
      // The run page's stream catches it up by version; the other pages look once on each
      // (re)connection, for what changed while they were loading or away.
      if (root.dataset.view !== "run" && opened++) {
        pending = merge(pending, {changed_steps: [parseInt(root.dataset.step, 10)]});
        drain();
      }
    };
    source.onerror = function () { setState(source && source.readyState === 2 ? "stopped" : "reconnecting…"); };
  }

  function stop() {
    if (!source) return;
    source.close();
    source = null;
  }

  function init() {
    root = document.getElementById("live");
    if (!root || typeof EventSource === "undefined" || typeof Idiomorph === "undefined") return;
    root.hidden = false;
    var box = document.getElementById("live-pause");
    function follow(pause) {  // pause or resume this page (its own box, or another tab's through localStorage)
      if (box) box.checked = pause;
      if (pause) { stop(); setState("paused"); return; }
      if (source) return;
      start();
      // the run page catches up by its version (`since=`); the others look once
      if (root.dataset.view !== "run") { pending = merge(pending, {changed_steps: [parseInt(root.dataset.step, 10)]}); drain(); }
    }
    if (box) {
      box.checked = paused();
      box.addEventListener("change", function () {
        try { localStorage.setItem(PAUSE_KEY, box.checked ? "1" : "0"); } catch (err) { /* private mode */ }
        follow(box.checked);
      });
    }
    // the choice is the browser's: a tab paused or resumed elsewhere is followed here (the `storage` event)
    window.addEventListener("storage", function (e) { if (e.key === PAUSE_KEY) follow(e.newValue === "1"); });
    var btn = document.getElementById("live-new");
    if (btn) btn.addEventListener("click", showNewRows);
    if (root.dataset.view === "run") watchCharts();
    if (paused()) setState("paused"); else start();
    window.addEventListener("pagehide", stop);
    window.addEventListener("pageshow", function (e) { if (e.persisted) start(); });  // back from the cache
    window.rollscopeLive = stats;  // what tests and the curious read: events seen, updates applied, fetches
  }

  document.addEventListener("DOMContentLoaded", init);
})();
