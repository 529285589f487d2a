// batchcast dashboard: the charts section of a page (controls, chart set
// kept in the URL, zoom shared by every chart, mean of runs or of each
// workload's runs, smoothing, the runs' events as markers, live updates)
// and live status of the runs tables.
"use strict";
(function () {
  const section = document.querySelector("section.charts");
  const POLL_MS = 2000, OVERLAP_MS = 3000;
  const MODES = ["each", "mean", "workload"];
  const defaultMode = section && MODES.includes(section.dataset.mode) ? section.dataset.mode : "each";

  function $(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // URL state: c=key[|key2] per chart, x, m (each|mean), s (smoothing), z=a,b
  const url = new URL(location.href);
  const state = {
    charts: url.searchParams.getAll("c").map((c) => c.split("|").filter(Boolean)).filter((c) => c.length),
    x: url.searchParams.get("x") === "step" ? "step" : "elapsed",
    mode: MODES.includes(url.searchParams.get("m")) ? url.searchParams.get("m") : defaultMode,
    smooth: Math.min(0.99, Math.max(0, parseFloat(url.searchParams.get("s")) || 0)),
    zoom: (url.searchParams.get("z") || "").split(",").map(Number).filter((v) => isFinite(v)),
  };
  if (state.zoom.length !== 2 || !(state.zoom[1] > state.zoom[0])) state.zoom = null;

  function saveUrl() {
    const u = new URL(location.href);
    for (const k of ["c", "x", "m", "s", "z"]) u.searchParams.delete(k);
    for (const c of state.charts) u.searchParams.append("c", c.join("|"));
    if (state.x !== "elapsed") u.searchParams.set("x", state.x);
    if (state.mode !== defaultMode) u.searchParams.set("m", state.mode);
    if (state.smooth > 0) u.searchParams.set("s", String(state.smooth));
    if (state.zoom) u.searchParams.set("z", state.zoom.map((v) => +v.toPrecision(6)).join(","));
    history.replaceState(null, "", u);
  }

  function apiQuery(runs, keys, extra) {
    const q = new URLSearchParams({ runs: runs.join(",") });
    for (const k of keys) q.append("key", k);
    q.set("x", state.x);
    for (const k in extra || {}) q.set(k, extra[k]);
    return q.toString();
  }

  // Mean of the runs of each metric: each run interpolated on one grid of
  // x values, averaged over the runs that span each one.
  function meanOf(series, keys, x) {
    return keys.map(([key]) => {
      const own = series.filter((s) => s.key === key && s.points.length);
      let lo = Infinity, hi = -Infinity;
      for (const s of own) { lo = Math.min(lo, s.points[0][0]); hi = Math.max(hi, s.points[s.points.length - 1][0]); }
      const n = x === "step" ? Math.min(400, hi - lo + 1) : 300;
      const points = [];
      const at = own.map(() => 0);
      for (let i = 0; i < n && hi >= lo; i++) {
        const gx = n > 1 ? lo + ((hi - lo) * i) / (n - 1) : lo;
        let sum = 0, count = 0, ts = 0;
        own.forEach((s, j) => {
          const p = s.points;
          if (gx < p[0][0] || gx > p[p.length - 1][0]) return;
          while (at[j] < p.length - 2 && p[at[j] + 1][0] < gx) at[j]++;
          const a = p[at[j]], b = p[Math.min(at[j] + 1, p.length - 1)];
          const t = b[0] > a[0] ? (gx - a[0]) / (b[0] - a[0]) : 0;
          sum += a[1] + t * (b[1] - a[1]); count++; ts = Math.max(ts, a[2]);
        });
        if (count) points.push([gx, sum / count, ts]);
      }
      return { run: 0, key, label: `mean of ${own.length} runs`, points };
    });
  }

  // One line per workload (by id: names repeat across experiments): its
  // run's own, or the mean of its runs.
  function perWorkload(series, keys, x) {
    const ids = [...new Set(series.map((s) => s.workload_id))];
    return ids.flatMap((id) => {
      const own = series.filter((s) => s.workload_id === id);
      const w = own[0].workload;
      const n = new Set(own.map((s) => s.run)).size;
      // meanOf's label counts the runs with points, which it averages.
      const lines = n > 1 ? meanOf(own, keys, x).map((s) => Object.assign(s, { label: `${w}: ${s.label}` })) : own;
      return lines.map((s) => Object.assign({}, s, { run: "workload:" + id, workload: w, workload_id: id }));
    });
  }

  // The x of an event on a step axis: the step its run had reached then,
  // interpolated in time between the run's points (from step 0 at the
  // run's start when its steps start at 0 or above); none after its last
  // point or on a run with none.
  function stepAt(s, ts) {
    const knots = s.points.map((p) => [p[2], p[0]]);
    if (knots.length && s.start_ms != null && knots[0][1] >= 0 && s.start_ms < knots[0][0]) knots.unshift([s.start_ms, 0]);
    if (!knots.length || ts < knots[0][0] || ts > knots[knots.length - 1][0]) return null;
    for (let i = 1; i < knots.length; i++) {
      const [ta, xa] = knots[i - 1], [tb, xb] = knots[i];
      if (ts <= tb) return tb > ta ? xa + ((ts - ta) / (tb - ta)) * (xb - xa) : xb;
    }
    return knots[0][1];
  }

  // The chart's markers: each event at its x, in the colour of the line it
  // belongs to. A shared producer's event comes once, with the first
  // charted run of its workload, and is drawn once: on the first of that
  // workload's runs where it has an x and a line.
  function markersOf(d, lines) {
    const seriesOf = (run) => d.series.find((s) => s.run === run && s.points.length) || d.series.find((s) => s.run === run);
    const group = (run) => {
      if (state.mode === "mean" && new Set(d.series.map((s) => s.run)).size > 1) return 0;
      if (state.mode === "workload") { const s = seriesOf(run); return s ? "workload:" + s.workload_id : run; }
      return run;
    };
    const candidates = (m) => {
      const s = m.from === m.run ? null : seriesOf(m.run);
      return s ? [...new Set(d.series.filter((t) => t.workload_id === s.workload_id).map((t) => t.run))] : [m.run];
    };
    const xOf = (m, run) => {
      const s = seriesOf(run);
      if (d.x === "step") return s ? stepAt(s, m.ts_ms) : null;
      if (run === m.run) return m.elapsed;
      return s && s.start_ms != null ? (m.ts_ms - s.start_ms) / 1000 : null;
    };
    const seen = new Set(), out = [];
    for (const m of d.markers || []) {
      for (const run of candidates(m)) {
        const x = xOf(m, run), g = group(run);
        const id = (m.from !== m.run ? "from " + m.from : "line " + g) + "|" + m.ts_ms + "|" + m.source + "|" + m.message;
        if (seen.has(id)) break;
        if (x === null || x === undefined || !lines.some((s) => s.run === g)) continue;
        seen.add(id);
        const head = m.message.split(":")[0];
        out.push({
          x, run: g, from: m.from, source: m.source,
          label: `${m.source}: ${head.length > 48 ? head.slice(0, 47) + "…" : head}`,
          title: `${m.source}, ${new Date(m.ts_ms).toISOString().replace("T", " ").slice(0, 19)} UTC: ${m.message}`,
        });
        break;
      }
    }
    return out;
  }

  function smooth(s, a) {
    if (!(a > 0)) return s;
    let acc = 0, w = 0;
    const points = s.points.map((p) => { acc = a * acc + (1 - a) * p[1]; w = a * w + (1 - a); return [p[0], acc / w, p[2]]; });
    return Object.assign({}, s, { points });
  }

  class Chart {
    constructor(grid, runs, keys) {
      this.runs = runs; this.keys = keys; this.data = null;
      this.root = $("div", { class: "chart" }, grid);
      const head = $("div", { class: "head" }, this.root);
      $("span", { class: "title" }, head, keys.join("  +  "));
      const tools = $("span", {}, head);
      this.csv = $("a", { class: "csv", download: "" }, tools, "CSV");
      $("span", {}, tools, " · ");
      const rm = $("a", { href: "#", class: "remove", title: "remove this chart" }, tools, "✕");
      rm.addEventListener("click", (ev) => { ev.preventDefault(); remove(this); });
      this.box = $("div", { class: "plot" }, this.root);
      this.legend = $("div", { class: "legend" }, this.root);
    }
    async load() {
      this.csv.href = "/api/csv?" + apiQuery(this.runs, this.keys);
      const r = await fetch("/api/series?" + apiQuery(this.runs, this.keys));
      const body = await r.json();
      if (!r.ok) { this.box.textContent = body.error || r.statusText; return false; }
      this.data = body;
      this.render();
      return body.live;
    }
    async poll() {
      if (!this.data) return false;
      let newest = 0;
      for (const s of this.data.series) for (const p of s.points) newest = Math.max(newest, p[2]);
      const after = newest - OVERLAP_MS;
      const r = await fetch("/api/series?" + apiQuery(this.runs, this.keys, { after }));
      if (!r.ok) return true;
      const body = await r.json();
      this.data.markers = body.markers;
      this.data.markers_left_off = body.markers_left_off;
      body.series.forEach((s, i) => {
        const old = this.data.series[i];
        if (old && old.run === s.run && old.key === s.key) {
          old.points = old.points.filter((p) => p[2] <= after).concat(s.points);
        }
      });
      this.data.live = body.live;
      this.render();
      return body.live;
    }
    render() {
      const d = this.data;
      let series = d.series;
      if (state.mode === "mean" && this.runs.length > 1) series = meanOf(d.series, d.keys, d.x);
      else if (state.mode === "workload") series = perWorkload(d.series, d.keys, d.x);
      series = series.map((s) => smooth(s, state.smooth));
      BatchcastChart.draw(this.box, this.legend, {
        keys: d.keys, x: d.x, series, xrange: state.zoom,
        markers: markersOf(d, series), markersLeftOff: d.markers_left_off || 0,
        onZoom: (z) => { state.zoom = z; saveUrl(); charts.forEach((c) => c.data && c.render()); },
      });
    }
  }

  let charts = [];
  function remove(chart) {
    const i = charts.indexOf(chart);
    charts.splice(i, 1);
    state.charts.splice(i, 1);
    chart.root.remove();
    saveUrl();
  }

  function controls(keys) {
    const bar = $("div", { class: "controls" }, section);
    const pick = (name) => {
      const sel = $("select", { name }, $("label", {}, bar, name === "key1" ? "metric " : "second axis "));
      if (name === "key2") $("option", { value: "" }, sel, "(no second metric)");
      for (const k of keys) $("option", { value: k }, sel, k);
      return sel;
    };
    const k1 = pick("key1"), k2 = pick("key2");
    const add = $("button", { type: "button", id: "add-chart" }, bar, "Add chart");
    const xSel = $("select", { name: "x" }, bar);
    $("option", { value: "elapsed" }, xSel, "x: elapsed time");
    $("option", { value: "step" }, xSel, "x: step");
    xSel.value = state.x;
    const mSel = $("select", { name: "mode" }, bar);
    $("option", { value: "each" }, mSel, "each run");
    $("option", { value: "mean" }, mSel, "mean of runs");
    $("option", { value: "workload" }, mSel, "mean per workload");
    mSel.value = state.mode;
    const lab = $("label", {}, bar, "smoothing ");
    const sm = $("input", { type: "range", min: 0, max: 0.95, step: 0.05, name: "smooth" }, lab);
    sm.value = state.smooth;
    const reset = $("button", { type: "button", id: "reset-zoom" }, bar, "Reset zoom");
    return { k1, k2, add, xSel, mSel, sm, reset };
  }

  async function start() {
    if (!section) return;
    const runs = section.dataset.runs.split(",").map(Number);
    const keys = JSON.parse(section.dataset.keys);
    const known = new Set(keys);
    state.charts = state.charts.map((c) => c.filter((k) => known.has(k)).slice(0, 2)).filter((c) => c.length);
    if (!url.searchParams.has("c")) state.charts = JSON.parse(section.dataset.defaults).map((k) => [k]);
    const ui = controls(keys);
    const grid = $("div", { class: "grid" }, section);
    const build = async () => {
      grid.textContent = "";
      charts = state.charts.map((k) => new Chart(grid, runs, k));
      const live = await Promise.all(charts.map((c) => c.load()));
      section.dataset.loaded = String(Number(section.dataset.loaded || 0) + 1);
      return live.some(Boolean);
    };
    ui.add.addEventListener("click", async () => {
      const ks = [ui.k1.value].concat(ui.k2.value && ui.k2.value !== ui.k1.value ? [ui.k2.value] : []);
      state.charts.push(ks);
      saveUrl();
      const c = new Chart(grid, runs, ks);
      charts.push(c);
      await c.load();
    });
    ui.xSel.addEventListener("change", () => { state.x = ui.xSel.value; state.zoom = null; saveUrl(); build(); });
    ui.mSel.addEventListener("change", () => { state.mode = ui.mSel.value; saveUrl(); charts.forEach((c) => c.render()); });
    ui.sm.addEventListener("input", () => { state.smooth = parseFloat(ui.sm.value); saveUrl(); charts.forEach((c) => c.render()); });
    ui.reset.addEventListener("click", () => { state.zoom = null; saveUrl(); charts.forEach((c) => c.render()); });
    saveUrl();
    let live = await build();
    while (live) {
      await new Promise((r) => setTimeout(r, POLL_MS));
      const any = await Promise.all(charts.map((c) => c.poll().catch(() => true)));
      live = any.some(Boolean);
    }
  }

  // Live status and duration of the runs in tables on this page.
  async function liveStatus() {
    const cells = [...document.querySelectorAll("[data-status]")];
    const open = cells.filter((c) => c.textContent === "RUNNING" || c.textContent === "PENDING");
    if (!open.length) return;
    const ids = [...new Set(open.map((c) => c.dataset.status))].slice(0, 50);
    try {
      const r = await fetch("/api/runs?runs=" + ids.join(","));
      if (r.ok) for (const s of await r.json()) {
        for (const c of document.querySelectorAll(`[data-status="${s.id}"]`)) { c.textContent = s.status; c.className = "status " + s.status.toLowerCase(); }
        for (const c of document.querySelectorAll(`[data-duration="${s.id}"]`)) c.textContent = s.duration || "-";
      }
    } catch (e) { /* the next round tries again */ }
    setTimeout(liveStatus, POLL_MS);
  }

  // The output of a run in progress, as it grows (until its status, kept
  // live above, says it ended; then once more).
  async function liveLogs() {
    const logs = [...document.querySelectorAll('pre.log[data-live="1"]')];
    if (!logs.length) return;
    let open = true;
    while (open) {
      await new Promise((r) => setTimeout(r, POLL_MS));
      const badge = document.querySelector(`[data-status="${logs[0].dataset.run}"]`);
      open = !badge || badge.textContent === "RUNNING" || badge.textContent === "PENDING";
      for (const pre of logs) {
        try {
          const r = await fetch(`/runs/${pre.dataset.run}/log/${pre.id}?tail=${pre.dataset.tail}`);
          if (r.ok) pre.textContent = await r.text();
        } catch (e) { /* the next round tries again */ }
      }
    }
  }

  start();
  liveStatus();
  liveLogs();
})();
