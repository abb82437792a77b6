// serveout loadtest: interactive SVG charts for report.html (no library, no network).
// Each <div class="chart" data-chart="ID"> is drawn from DATA.charts[ID]:
//   {title, x: {label, log}, y: {label, log}, series: [{name, points: [[x, y], ...], step, dash}],
//    vlines: [{x, label}], hlines: [{y, label}], bands: [{from, to, label}]}
// Hover: the nearest point of each series; click a legend entry: hide/show it;
// drag: zoom on x; double-click: reset. A drawn chart gets data-rendered="true".
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf"];
  const W = 720, H = 300, M = {l: 64, r: 16, t: 28, b: 42};

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v) {
    if (v === null || !isFinite(v)) return "-";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return a >= 100 ? v.toFixed(0) : String(Number(v.toPrecision(3)));
  }

  function scale(lo, hi, a, b, log) {
    if (log) {
      const l0 = Math.log10(lo), l1 = Math.log10(hi);
      const f = (v) => a + (Math.log10(Math.max(v, lo)) - l0) / (l1 - l0 || 1) * (b - a);
      f.inv = (p) => Math.pow(10, l0 + (p - a) / (b - a) * (l1 - l0));
      return f;
    }
    const f = (v) => a + (v - lo) / (hi - lo || 1) * (b - a);
    f.inv = (p) => lo + (p - a) / (b - a) * (hi - lo);
    return f;
  }

  function ticks(lo, hi, log) {
    if (log) {
      const out = [];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        const v = Math.pow(10, e);
        if (v >= lo && v <= hi) out.push(v);
      }
      return out.length ? out : [lo, hi];
    }
    const span = hi - lo || 1, raw = span / 6, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }

  function extent(values, log) {
    const vs = values.filter((v) => v !== null && isFinite(v) && (!log || v > 0));
    if (!vs.length) return [log ? 1 : 0, log ? 10 : 1];
    let lo = Math.min(...vs), hi = Math.max(...vs);
    if (lo === hi) { lo = log ? lo / 2 : lo - 1; hi = log ? hi * 2 : hi + 1; }
    return [lo, hi];
  }

  function draw(div, spec, view) {
    div.innerHTML = "";
    const hidden = div._hidden || (div._hidden = new Set());
    const shown = spec.series.filter((s) => !hidden.has(s.name));
    const xs = [], ys = [];
    for (const s of shown) for (const p of s.points) {
      if (view && (p[0] < view[0] || p[0] > view[1])) continue;
      xs.push(p[0]); ys.push(p[1]);
    }
    for (const l of spec.vlines || []) xs.push(l.x);
    for (const l of spec.hlines || []) ys.push(l.y);
    const [x0, x1] = view || extent(xs, spec.x.log);
    let [y0, y1] = spec.y.range || extent(ys, spec.y.log);
    if (!spec.y.log && !spec.y.range && y0 > 0) y0 = 0;
    const sx = scale(x0, x1, M.l, W - M.r, spec.x.log), sy = scale(y0, y1, H - M.b, M.t, spec.y.log);
    const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": spec.title}, div);
    el("text", {x: M.l, y: 16, class: "title"}, svg).textContent = spec.title;
    const clip = "c" + Math.random().toString(36).slice(2);
    el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b}, el("clipPath", {id: clip}, svg));
    const plot = el("g", {"clip-path": `url(#${clip})`}, svg);
    for (const b of spec.bands || []) {
      el("rect", {x: sx(b.from), y: M.t, width: Math.max(sx(b.to) - sx(b.from), 0), height: H - M.t - M.b,
                  class: "band"}, plot);
    }
    for (const t of ticks(x0, x1, spec.x.log)) {
      el("line", {x1: sx(t), x2: sx(t), y1: M.t, y2: H - M.b, class: "grid"}, svg);
      el("text", {x: sx(t), y: H - M.b + 14, class: "tick", "text-anchor": "middle"}, svg).textContent = fmt(t);
    }
    for (const t of ticks(y0, y1, spec.y.log)) {
      el("line", {x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t), class: "grid"}, svg);
      el("text", {x: M.l - 4, y: sy(t) + 4, class: "tick", "text-anchor": "end"}, svg).textContent = fmt(t);
    }
    el("text", {x: (M.l + W - M.r) / 2, y: H - 6, class: "label", "text-anchor": "middle"}, svg).textContent = spec.x.label;
    el("text", {x: 12, y: (M.t + H - M.b) / 2, class: "label", "text-anchor": "middle",
                transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})`}, svg).textContent = spec.y.label;
    spec.series.forEach((s, i) => {
      s.color = s.color || COLORS[i % COLORS.length];
      if (hidden.has(s.name) || !s.points.length) return;
      let d = "";
      let pen = false;
      s.points.forEach((p, k) => {
        if (p[1] === null || !isFinite(p[1])) { pen = false; return; }
        const X = sx(p[0]).toFixed(1), Y = sy(p[1]).toFixed(1);
        if (!pen) { d += `M${X},${Y}`; pen = true; return; }
        d += s.step ? `H${X}V${Y}` : `L${X},${Y}`;
      });
      el("path", {d, class: "line", stroke: s.color, "stroke-dasharray": s.dash ? "5,3" : "none",
                  "data-series": s.name}, plot);
      if (s.markers) for (const p of s.points) {
        if (p[1] !== null && isFinite(p[1])) el("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: s.color}, plot);
      }
    });
    for (const l of spec.vlines || []) {
      el("line", {x1: sx(l.x), x2: sx(l.x), y1: M.t, y2: H - M.b, class: "ref"}, plot);
      el("text", {x: sx(l.x) + 3, y: M.t + 10, class: "reflabel"}, plot).textContent = l.label;
    }
    for (const l of spec.hlines || []) {
      el("line", {x1: M.l, x2: W - M.r, y1: sy(l.y), y2: sy(l.y), class: "ref"}, plot);
      el("text", {x: W - M.r - 3, y: sy(l.y) - 3, class: "reflabel", "text-anchor": "end"}, plot).textContent = l.label;
    }
    legend(div, spec, view);
    interact(div, spec, svg, sx, sy, x0, x1, shown);
    div.setAttribute("data-rendered", "true");
    div.setAttribute("data-series-drawn", String(svg.querySelectorAll("path.line").length));
  }

  function legend(div, spec, view) {
    const box = document.createElement("div");
    box.className = "legend";
    for (const s of spec.series) {
      const item = document.createElement("span");
      item.className = "item" + (div._hidden.has(s.name) ? " off" : "");
      item.innerHTML = `<i style="background:${s.color}"></i>`;
      item.appendChild(document.createTextNode(s.name));
      item.title = "click to hide or show";
      item.addEventListener("click", () => {
        if (div._hidden.has(s.name)) div._hidden.delete(s.name); else div._hidden.add(s.name);
        draw(div, spec, view);
      });
      box.appendChild(item);
    }
    div.appendChild(box);
  }

  function nearest(points, x) {
    let best = null, bd = Infinity;
    for (const p of points) {
      const d = Math.abs(p[0] - x);
      if (d < bd && p[1] !== null && isFinite(p[1])) { bd = d; best = p; }
    }
    return best;
  }

  function interact(div, spec, svg, sx, sy, x0, x1, shown) {
    const tip = document.createElement("div");
    tip.className = "tip";
    div.appendChild(tip);
    const cross = el("line", {y1: M.t, y2: H - M.b, class: "cross", visibility: "hidden"}, svg);
    const zoom = el("rect", {y: M.t, height: H - M.t - M.b, class: "zoom", visibility: "hidden"}, svg);
    let dragFrom = null;
    const toX = (ev) => {
      const box = svg.getBoundingClientRect();
      return (ev.clientX - box.left) / box.width * W;
    };
    svg.addEventListener("mousemove", (ev) => {
      const px = Math.min(Math.max(toX(ev), M.l), W - M.r), x = sx.inv(px);
      cross.setAttribute("x1", px); cross.setAttribute("x2", px); cross.setAttribute("visibility", "visible");
      const rows = shown.map((s) => [s, nearest(s.points, x)]).filter((r) => r[1]);
      tip.innerHTML = `<b>${spec.x.label}: ${fmt(x)}</b>` + rows.map(([s, p]) =>
        `<br><i style="background:${s.color}"></i>${s.name}: ${fmt(p[1])} (at ${fmt(p[0])})`).join("");
      tip.style.display = rows.length ? "block" : "none";
      tip.style.left = Math.min(ev.offsetX + 14, div.clientWidth - 220) + "px";
      tip.style.top = (ev.offsetY + 10) + "px";
      if (dragFrom !== null) {
        zoom.setAttribute("x", Math.min(dragFrom, px)); zoom.setAttribute("width", Math.abs(px - dragFrom));
        zoom.setAttribute("visibility", "visible");
      }
    });
    svg.addEventListener("mouseleave", () => { tip.style.display = "none"; cross.setAttribute("visibility", "hidden"); });
    svg.addEventListener("mousedown", (ev) => { dragFrom = Math.min(Math.max(toX(ev), M.l), W - M.r); ev.preventDefault(); });
    svg.addEventListener("mouseup", (ev) => {
      if (dragFrom === null) return;
      const to = Math.min(Math.max(toX(ev), M.l), W - M.r), from = dragFrom;
      dragFrom = null;
      if (Math.abs(to - from) > 5) draw(div, spec, [sx.inv(Math.min(from, to)), sx.inv(Math.max(from, to))]);
      else zoom.setAttribute("visibility", "hidden");
    });
    svg.addEventListener("dblclick", () => draw(div, spec, null));
  }

  function main() {
    const data = JSON.parse(document.getElementById("report-data").textContent);
    let drawn = 0;
    for (const div of document.querySelectorAll("div.chart")) {
      const spec = data.charts[div.getAttribute("data-chart")];
      if (!spec) throw new Error("no data for chart " + div.getAttribute("data-chart"));
      draw(div, spec, null);
      drawn += 1;
    }
    document.body.setAttribute("data-charts-rendered", String(drawn));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main); else main();
})();
