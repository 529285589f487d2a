// batchcast dashboard: line charts drawn as inline SVG (this project's own
// code, no library). One x axis (elapsed seconds or step), one y axis per
// metric (left, right), one line per series, events as dotted vertical
// markers (label along the line, the whole event on hover); drag to zoom,
// double-click to reset. Each line carries its scale as data-* attributes,
// and each marker its x, so a test can read the drawn values back.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const W = 760, H = 380, TOP = 12, BOTTOM = 50;
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    if (!(hi >= lo)) return [0, 1];
    if (hi === lo) { const d = Math.abs(lo) * 0.05 || 1; return [lo - d, hi + d]; }
    return [lo, hi];
  }

  function ticks(lo, hi, n) {
    const raw = (hi - lo) / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    return out;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + "k";
    return String(+v.toPrecision(4));
  }

  // spec: {keys: [[key, label]], x: "elapsed"|"step", series: [{label, key,
  // run, points: [[x, y, ts]]}], markers: [{x, run, from, source, label,
  // title}], markersLeftOff, xrange: [a, b] | null, onZoom(range|null)}
  function draw(box, legend, spec) {
    box.textContent = "";
    legend.textContent = "";
    const two = spec.keys.length > 1;
    const LEFT = 78, RIGHT = two ? 78 : 24;
    const x1px = W - RIGHT, y1px = H - BOTTOM;
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img" }, box);
    let xs = [];
    for (const s of spec.series) for (const p of s.points) xs.push(p[0]);
    const [xa, xb] = spec.xrange || extent(xs);
    xs = null;
    const sx = (x) => LEFT + ((x - xa) / (xb - xa || 1)) * (x1px - LEFT);
    svg.dataset.x0 = xa; svg.dataset.x1 = xb; svg.dataset.left = LEFT; svg.dataset.right = x1px;
    const clipId = "clip" + Math.random().toString(36).slice(2);
    el("rect", { x: LEFT, y: TOP, width: x1px - LEFT, height: y1px - TOP }, el("clipPath", { id: clipId }, el("defs", {}, svg)));
    // y scales, one per metric, over the points inside the x range
    const scales = spec.keys.map(([key]) => {
      const vals = [];
      for (const s of spec.series) if (s.key === key) for (const p of s.points) if (p[0] >= xa && p[0] <= xb) vals.push(p[1]);
      const [rawLo, rawHi] = extent(vals);
      const pad = (rawHi - rawLo) * 0.05;
      const lo = rawLo >= 0 && rawLo - pad < 0 ? 0 : rawLo - pad, hi = rawHi + pad;
      return { key, lo, hi, y: (v) => y1px - ((v - lo) / (hi - lo)) * (y1px - TOP) };
    });
    // grid and axes
    for (const t of ticks(xa, xb, 8)) {
      const x = sx(t);
      el("line", { x1: x, x2: x, y1: TOP, y2: y1px, class: "grid-line" }, svg);
      el("text", { x, y: y1px + 16, "text-anchor": "middle" }, svg).textContent = fmt(t);
    }
    scales.forEach((sc, i) => {
      const xAxis = i === 0 ? LEFT : x1px;
      for (const t of ticks(sc.lo, sc.hi, 6)) {
        const y = sc.y(t);
        if (i === 0) el("line", { x1: LEFT, x2: x1px, y1: y, y2: y, class: "grid-line" }, svg);
        el("text", { x: i === 0 ? xAxis - 6 : xAxis + 6, y: y + 4, "text-anchor": i === 0 ? "end" : "start" }, svg).textContent = fmt(t);
      }
      el("line", { x1: xAxis, x2: xAxis, y1: TOP, y2: y1px, class: "axis" }, svg);
      const lx = i === 0 ? 16 : W - 10;
      const label = el("text", { x: lx, y: (TOP + y1px) / 2, "text-anchor": "middle", class: "axis-label", transform: `rotate(-90 ${lx} ${(TOP + y1px) / 2})` }, svg);
      label.textContent = spec.keys[i][1] + (two ? (i === 0 ? " — solid" : " — dashed") : "");
    });
    el("line", { x1: LEFT, x2: x1px, y1: y1px, y2: y1px, class: "axis" }, svg);
    el("text", { x: (LEFT + x1px) / 2, y: H - 8, "text-anchor": "middle", class: "axis-label" }, svg).textContent =
      spec.x === "step" ? "step" : "elapsed time since the run started (s)";
    // lines
    const runs = [...new Set(spec.series.map((s) => s.run))];
    const g = el("g", { "clip-path": `url(#${clipId})` }, svg);
    for (const s of spec.series) {
      const ki = spec.keys.findIndex(([k]) => k === s.key);
      const sc = scales[ki];
      const colour = PALETTE[runs.indexOf(s.run) % PALETTE.length];
      const pts = s.points.map((p) => sx(p[0]).toFixed(2) + "," + sc.y(p[1]).toFixed(2)).join(" ");
      const line = el("polyline", { points: pts, fill: "none", stroke: colour, "stroke-width": 2, "stroke-linejoin": "round" }, g);
      if (ki === 1) line.setAttribute("stroke-dasharray", "6 4");
      Object.assign(line.dataset, { run: s.run, key: s.key, label: s.label, y0: sc.lo, y1: sc.hi, top: TOP, bottom: y1px });
      if (!s.points.length) continue;
      const item = document.createElement("span");
      item.style.setProperty("--c", colour);
      if (ki === 1) item.className = "dashed";
      item.textContent = two ? `${s.label} — ${s.key}` : s.label;
      legend.appendChild(item);
    }
    marks(svg, legend, spec, runs, sx, xa, xb, TOP, y1px, clipId);
    if (!spec.series.some((s) => s.points.length)) {
      el("text", { x: (LEFT + x1px) / 2, y: (TOP + y1px) / 2, "text-anchor": "middle" }, svg).textContent = "no points yet";
    }
    brush(svg, LEFT, x1px, TOP, y1px, xa, xb, spec.onZoom);
  }

  // Events as vertical markers in their line's colour. Markers closer than
  // a label's width share one label: the latest one's, with how many more
  // (each marker keeps its own hover text).
  function marks(svg, legend, spec, runs, sx, xa, xb, top, bottom, clipId) {
    const all = (spec.markers || []).filter((m) => m.x >= xa && m.x <= xb).sort((a, b) => a.x - b.x);
    if (!all.length && !spec.markersLeftOff) return;
    const g = el("g", { class: "markers", "clip-path": `url(#${clipId})` }, svg);
    const clusters = [];
    for (const m of all) {
      const last = clusters[clusters.length - 1];
      if (last && sx(m.x) - sx(last[0].x) < 13) last.push(m);
      else clusters.push([m]);
    }
    for (const cluster of clusters) {
      let mark = null;
      for (const m of cluster) {
        const x = sx(m.x), colour = PALETTE[Math.max(0, runs.indexOf(m.run)) % PALETTE.length];
        mark = el("g", { class: "marker" }, g);
        Object.assign(mark.dataset, { x: m.x, run: m.run, from: m.from, source: m.source });
        el("title", {}, mark).textContent = m.title;
        el("line", { x1: x, x2: x, y1: top, y2: bottom, stroke: colour, "stroke-width": 1.5, "stroke-dasharray": "2 3" }, mark);
        el("line", { x1: x, x2: x, y1: top, y2: bottom, class: "hit" }, mark);
      }
      const m = cluster[cluster.length - 1], x = sx(m.x) + 12;
      const t = el("text", { x, y: top + 4, "text-anchor": "end", transform: `rotate(-90 ${x} ${top + 4})`, class: "marker-label" }, mark);
      t.textContent = m.label + (cluster.length > 1 ? ` (+${cluster.length - 1})` : "");
    }
    const item = document.createElement("em");
    item.className = "events";
    item.textContent = `┆ ${all.length} event${all.length === 1 ? "" : "s"} (hover a marker)` +
      (spec.markersLeftOff ? `; ${spec.markersLeftOff} more not drawn` : "");
    legend.appendChild(item);
  }

  // Drag across the plot to zoom into that x range; double-click resets.
  function brush(svg, left, right, top, bottom, xa, xb, onZoom) {
    let start = null, rect = null;
    const toX = (ev) => {
      const r = svg.getBoundingClientRect();
      return Math.min(right, Math.max(left, ((ev.clientX - r.left) / r.width) * W));
    };
    svg.addEventListener("mousedown", (ev) => {
      start = toX(ev);
      rect = el("rect", { x: start, y: top, width: 0, height: bottom - top, class: "brush" }, svg);
      ev.preventDefault();
    });
    svg.addEventListener("mousemove", (ev) => {
      if (start === null) return;
      const x = toX(ev);
      rect.setAttribute("x", Math.min(start, x));
      rect.setAttribute("width", Math.abs(x - start));
    });
    const end = (ev) => {
      if (start === null) return;
      const x = toX(ev), a = Math.min(start, x), b = Math.max(start, x);
      start = null;
      rect.remove();
      const v = (px) => xa + ((px - left) / (right - left)) * (xb - xa);
      if (b - a > 4) onZoom([v(a), v(b)]);
    };
    svg.addEventListener("mouseup", end);
    svg.addEventListener("mouseleave", end);
    svg.addEventListener("dblclick", () => onZoom(null));
  }

  window.BatchcastChart = { draw, PALETTE };
})();
