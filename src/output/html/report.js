// SPDX-License-Identifier: MIT
// leakguard's HTML report (src/output/render_html.c): draws each leak's memory curve,
// the flame graphs of the peak and of growth, and the table of allocation sites from
// the page's own data (#lg-data). No network, no library: plain DOM and SVG.
"use strict";
(function () {
  const t0 = performance.now();
  window.addEventListener("error", (e) => { document.body.dataset.lgError = String(e.message || e); });
  const phases = [];
  let tp = performance.now();
  const phase = (name) => { const now = performance.now(); phases.push(name + " " + Math.round(now - tp)); tp = now; };
  const D = JSON.parse(document.getElementById("lg-data").textContent);
  phase("parse");
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = { host: "#0969da", mmap: "#8250df", device: "#1a7f37", managed: "#bf8700", pinned: "#cf222e" };

  function fmtBytes(v) {
    const a = Math.abs(v), u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0, x = a;
    while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
    return (v < 0 ? "-" : "") + (i ? x.toFixed(x < 10 ? 2 : x < 100 ? 1 : 0) : String(Math.round(x))) + " " + u[i];
  }
  function fmtDur(s) {
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }
  function el(tag, attrs, text) {
    const e = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---------------------------------------------------------------- memory curves
  function drawChart(box, s, bySteps) {
    box.textContent = "";
    const W = 900, H = 220, L = 70, R = 20, T = 12, B = 28;
    const xs = bySteps ? s.step : s.t;
    const n = xs.length;
    if (!n) { box.append(el("p", { class: "note" }, "no snapshots")); return; }
    const spaces = Object.keys(s.spaces);
    let ymax = 1;
    for (const sp of spaces) for (const v of s.spaces[sp]) ymax = Math.max(ymax, v);
    let xmax = Math.max(xs[n - 1], 1e-9);
    // time to OOM: a dashed line over the next quarter of the axis, from the highest
    // point (a process that exits frees its leak: the curve drops before the end)
    const proj = !bySteps && s.oom_s !== null && s.rate > 0;
    const xEnd = proj ? xmax * 1.25 : xmax;
    let top = 0, topV = -1;
    for (let i = 0; i < n; i++) {
      let v = 0;
      for (const sp of spaces) v += s.spaces[sp][i];
      if (v > topV) { topV = v; top = i; }
    }
    if (proj) ymax = Math.max(ymax, topV + s.rate * (xEnd - xs[top]));
    const X = (x) => L + (x / xEnd) * (W - L - R), Y = (y) => H - B - (y / ymax) * (H - T - B);
    const svg = el("svg:svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "memory of leak L" + s.leak });
    svg.append(el("svg:line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
    svg.append(el("svg:line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
    for (let k = 0; k <= 4; k++) {
      const yv = (ymax * k) / 4;
      svg.append(el("svg:text", { x: L - 6, y: Y(yv) + 4, "text-anchor": "end" }, fmtBytes(yv)));
      const xv = (xEnd * k) / 4;
      svg.append(el("svg:text", { x: X(xv), y: H - 8, "text-anchor": "middle" },
        bySteps ? String(Math.round(xv)) : fmtDur(xv)));
    }
    for (const sp of spaces) {
      const v = s.spaces[sp];
      let d = "";
      for (let i = 0; i < n; i++) d += (i ? " " : "") + X(xs[i]).toFixed(1) + "," + Y(v[i]).toFixed(1);
      svg.append(el("svg:polyline", { class: "series", "data-space": sp, points: d, stroke: COLORS[sp] || "#57606a" }));
    }
    if (proj) {
      svg.append(el("svg:polyline", { class: "oom", points: `${X(xs[top])},${Y(topV)} ${X(xEnd)},${Y(topV + s.rate * (xEnd - xs[top]))}` }));
      svg.append(el("svg:text", { x: X(xEnd) - 4, y: T + 12, "text-anchor": "end", fill: "#d73a49" }, "OOM in " + fmtDur(s.oom_s)));
    }
    svg.append(el("svg:text", { x: L + 6, y: T + 12 }, spaces.join(", ") + (bySteps ? " — by step" : " — by time")));
    box.append(svg);
    if (s.step.length && s.step[n - 1] > 0) {
      const b = el("button", { type: "button" }, bySteps ? "show by time" : "show by step");
      b.addEventListener("click", () => drawChart(box, s, !bySteps));
      box.append(b);
    }
  }
  for (const s of D.series) {
    const box = document.querySelector(`.chart[data-leak="${s.leak - 1}"]`);
    if (box) drawChart(box, s, false);
  }

  // ---------------------------------------------------------------- flame graphs
  // stacks: [peak, growth, end, alloc, site, leaf node, generation (-1 none), mean
  // lifetime s, lifetime bound s, p90 lifetime bound s (0 none, -1 kept)
  // (docs/lifetimes.md), library site (-1 none)]: site and library site are names, the
  // frame the report names the site by and the one it allocated through; nodes: (parent, name) pairs of
  // the calling-context tree, node 0 the root (built by render_html.c). A tree's values
  // are the stacks' values summed up from their leaves.
  const NN = D.nodes.length / 2 + 1;
  const par = new Uint32Array(NN), nam = new Int32Array(NN);
  nam[0] = -1;
  for (let i = 1; i < NN; i++) { par[i] = D.nodes[2 * (i - 1)]; nam[i] = D.nodes[2 * (i - 1) + 1]; }
  // children of every node (compressed rows), in node order
  const start = new Uint32Array(NN + 1), kids = new Uint32Array(NN);
  for (let i = 1; i < NN; i++) start[par[i] + 1]++;
  for (let i = 0; i < NN; i++) start[i + 1] += start[i];
  const fill = start.slice(0, NN);
  for (let i = 1; i < NN; i++) kids[fill[par[i]]++] = i;
  function buildTree(vi) {
    const val = new Float64Array(NN);
    for (const s of D.stacks) {
      const v = s[vi];
      if (v <= 0) continue;
      for (let node = s[5]; ; node = par[node]) {
        val[node] += v;
        if (node === 0) break;
      }
    }
    const order = new Uint32Array(kids); // largest first, per node
    for (let i = 0; i < NN; i++) {
      const a = start[i], b = start[i + 1];
      if (b - a > 1 && val[i] > 0) order.subarray(a, b).sort((x, y) => val[y] - val[x]);
    }
    return { nam, val, start, kids: order };
  }
  function hue(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return `hsl(${20 + (h % 40)}, ${60 + (h % 25)}%, ${62 + (h % 12)}%)`;
  }
  function drawFlame(box, tr, rootId, title) {
    box.textContent = "";
    const total = tr.val[rootId];
    if (!total) { box.append(el("div", { class: "fg-empty" }, "nothing to show (" + title + " is 0 everywhere)")); return; }
    const rowH = 17, minFrac = 0.002;
    let depth = 0;
    const frag = document.createDocumentFragment();
    function walk(id, x, w, d) {
      depth = Math.max(depth, d + 1);
      const name = tr.nam[id] < 0 ? "all" : D.names[tr.nam[id]];
      const fn = name.split("\t")[0];
      const e = el("div", { class: "fg-node", title: `${name.replace("\t", "  ")}\n${fmtBytes(tr.val[id])}${title === "growth" ? "/s" : ""} (${(100 * tr.val[id] / total).toFixed(1)} %)` }, fn);
      e.style.left = (x * 100).toFixed(4) + "%";
      e.style.width = (w * 100).toFixed(4) + "%";
      e.style.top = d * rowH + "px";
      e.style.background = tr.nam[id] < 0 ? "#d0d7de" : hue(fn);
      e.dataset.fn = fn;
      e.addEventListener("click", (ev) => { ev.stopPropagation(); drawFlame(box, tr, id, title); });
      frag.append(e);
      let cx = x;
      for (let k = tr.start[id]; k < tr.start[id + 1]; k++) {
        const ch = tr.kids[k], cw = (w * tr.val[ch]) / tr.val[id];
        if (cw < minFrac) break; // largest first: the rest are smaller
        walk(ch, cx, cw, d + 1);
        cx += cw;
      }
    }
    walk(rootId, 0, 1, 0);
    box.style.height = depth * rowH + 4 + "px";
    box.append(frag);
  }
  phase("curves");
  const peakTree = buildTree(0);
  phase("peak-tree");
  drawFlame(document.getElementById("flame-peak"), peakTree, 0, "peak");
  phase("peak-draw");
  drawFlame(document.getElementById("flame-growth"), buildTree(1), 0, "growth");
  phase("growth");

  // ---------------------------------------------------------------- sites table
  const sites = new Map();
  for (const s of D.stacks) {
    let x = sites.get(s[4]);
    if (!x) {
      x = { site: s[4], peak: 0, growth: 0, end: 0, alloc: 0, stacks: 0, gen: -1, life: -1, below: 0, p90: 0,
        lifeAlloc: -1, lib: -1, libPeak: -1 };
      sites.set(s[4], x);
    }
    x.peak += s[0]; x.growth += s[1]; x.end += s[2]; x.alloc += s[3]; x.stacks++;
    // "via" the library frame of the stack that held the most at the peak
    if (s[10] >= 0 && s[0] > x.libPeak) { x.lib = s[10]; x.libPeak = s[0]; }
    // the lifetime of the stack that allocated the most stands for the row
    if (s[6] >= 0 && s[3] > x.lifeAlloc) {
      x.gen = s[6]; x.life = s[7]; x.below = s[8]; x.p90 = s[9]; x.lifeAlloc = s[3];
    }
  }
  const GENS = ["young", "middle", "old"];
  function fmtSecs(v) {
    if (v < 1e-5) return (v * 1e6).toFixed(1) + " us";
    if (v < 1e-3) return Math.round(v * 1e6) + " us";
    if (v < 0.1) return (v * 1e3).toFixed(1) + " ms";
    if (v < 1) return Math.round(v * 1e3) + " ms";
    if (v < 120) return v.toFixed(1) + " s";
    return (v / 60).toFixed(1) + " min";
  }
  function lifeText(r) {
    if (r.gen < 0) return "";
    const p90 = r.p90 > 0 ? ", p90 < " + fmtSecs(r.p90) : r.p90 < 0 ? ", p90 kept" : "";
    return GENS[r.gen] + (r.below > 0 ? " < " + fmtSecs(r.below) : " ~" + fmtSecs(r.life)) + p90;
  }
  const rows = [...sites.values()];
  const SHOW = 1000;
  const tbody = document.querySelector("#sites-table tbody");
  function render(key) {
    if (key === "name") rows.sort((a, b) => (D.names[a.site] || "").localeCompare(D.names[b.site] || ""));
    else rows.sort((a, b) => b[key] - a[key] || b.end - a.end);
    tbody.textContent = "";
    const frag = document.createDocumentFragment();
    for (const r of rows.slice(0, SHOW)) {
      const tr = el("tr");
      const name = r.site >= 0 ? D.names[r.site] : "??";
      const [fn, loc] = name.split("\t");
      const td = el("td");
      td.append(el("code", { class: "fn" }, fn), document.createTextNode(" "), el("span", { class: "loc" }, loc || ""));
      if (r.lib >= 0) {
        const [lfn, lloc] = D.names[r.lib].split("\t");
        td.append(document.createTextNode(" "), el("span", { class: "via" }, "via"), document.createTextNode(" "),
          el("code", { class: "fn" }, lfn), document.createTextNode(" "), el("span", { class: "loc" }, lloc || ""));
      }
      tr.append(td, el("td", {}, r.growth > 0 ? "+" + fmtBytes(r.growth) + "/s" : ""), el("td", {}, fmtBytes(r.end)),
        el("td", {}, fmtBytes(r.peak)), el("td", {}, fmtBytes(r.alloc)), el("td", {}, String(r.stacks)),
        el("td", {}, lifeText(r)));
      if (r.growth > 0) tr.className = "leaking";
      frag.append(tr);
    }
    tbody.append(frag);
    for (const th of document.querySelectorAll("#sites-table th")) th.classList.toggle("sorted", th.dataset.k === key);
    document.getElementById("sites-note").textContent = rows.length > SHOW
      ? `${rows.length} sites; the first ${SHOW} shown (click a column to sort)` : `${rows.length} sites (click a column to sort)`;
  }
  for (const th of document.querySelectorAll("#sites-table th")) th.addEventListener("click", () => render(th.dataset.k));
  render("growth");
  phase("sites");
  document.body.dataset.lgPhases = phases.join(", ");
  // the script's own time, and the whole load from the start of navigation (the HTML
  // parsed, the data parsed, everything drawn)
  document.body.dataset.lgRenderMs = String(Math.round(performance.now() - t0));
  document.body.dataset.lgLoadMs = String(Math.round(performance.now()));
  // A self-test for headless browsers, which cannot click (tests/integration/html.py):
  // the page opened as "#lg-test-sort=KEY" clicks the site table's KEY column, as a
  // person would, once everything is drawn (after the clock above stopped).
  const test = /^#lg-test-sort=(\w+)$/.exec(location.hash);
  const th = test && document.querySelector(`#sites-table th[data-k="${test[1]}"]`);
  if (th) {
    th.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    document.body.dataset.lgTestSorted = test[1];
  }
  document.body.dataset.lgReady = "1";
})();
