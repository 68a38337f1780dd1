// Run timeline: every nsys report of the run on one aligned clock, lanes grouped by rank, drawn on a canvas.
// The server sends a downsampled window (at most one box per lane, category and pixel column); the lane
// catalogue comes with every window and never changes, so lanes stay put while zooming.
// A lane's boxes arrive as {fields: ["start_ns", "end_ns", "count", "busy_ns", "category", "name"(, "depth")],
// rows: [[...], ...]} (analysis.views.timeline.box_table); each lane's field positions are looked up by name once.
"use strict";

(function () {
  const GP = window.GP;
  const COLORS = { compute: "#2b6cb0", nccl: "#dd6b20", memcpy: "#38a169", memset: "#319795",
    cuda_api: "#718096", nvtx: "#805ad5" };
  const LEGEND = [["compute", "compute kernel"], ["nccl", "NCCL kernel"], ["memcpy", "memcpy"],
    ["memset", "memset"], ["cuda_api", "CUDA API call"], ["nvtx", "NVTX range"]];
  // Analysis phases (report JSON `phases`) as bands behind each rank's lanes.
  const PHASE_COLORS = { startup: "rgba(160, 174, 192, 0.22)", warmup: "rgba(236, 201, 75, 0.22)",
    steady: "rgba(72, 187, 120, 0.16)", work: "rgba(72, 187, 120, 0.16)", epilogue: "rgba(129, 230, 217, 0.2)",
    teardown: "rgba(160, 174, 192, 0.22)", whole: "rgba(203, 213, 224, 0.18)" };
  const WINDOW_COLOR = "#2f855a";
  const LOOP_COLOR = "#6b46c1";   // the loops the analysis found: a bracket over each rank's header row
  let LABEL_W = 230;  // at most 30 % of the canvas (a phone keeps 70 % for the plot); set in draw
  const GROUP_H = 20, GPU_H = 16, API_H = 14, NVTX_H = 12, GAP = 2, AXIS_H = 24;
  const UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];

  // A lane's boxes: its rows and the position of each named field in them.
  function boxTable(boxes) {
    const at = {};
    (boxes.fields || []).forEach((name, i) => { at[name] = i; });
    return { rows: boxes.rows || [], at: at };
  }
  const NO_BOXES = { rows: [], at: {} };

  // A tick step of 1, 2 or 5 times a power of ten giving about `n` ticks over `span`.
  function niceStep(span, n) {
    const raw = span / Math.max(1, n);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  // A tick label: the time from the origin in the unit its size reads best in, with 3 significant digits
  // or as many decimals as the zoom needs to tell ticks apart, grouped in threes ("+1.326 858 2 s").
  function tickLabel(rel, step) {
    const a = Math.abs(rel);
    const [div, unit] = UNITS.find(([d]) => Math.max(a, step) >= d * 0.9995) || UNITS[3];
    const need = Math.max(0, Math.ceil(-Math.log10(step / div) - 1e-9));
    const v = a / div;
    const sig3 = a === 0 || div === 1 ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0;
    const [whole, frac] = v.toFixed(Math.min(9, Math.max(need, sig3))).split(".");
    const digits = frac ? "." + frac.replace(/(\d{3})(?=\d)/g, "$1 ") : "";
    return (rel > 0 ? "+" : rel < 0 ? "−" : "") + whole + digits + " " + unit;
  }

  function Timeline(root) {
    this.root = root;
    this.url = root.getAttribute("data-timeline-url");
    this.selectUrl = root.getAttribute("data-select-url");
    this.traceUrl = root.getAttribute("data-trace-url");
    this.canvas = root.querySelector("canvas");
    this.canvas.setAttribute("tabindex", "0");
    this.status = root.querySelector(".tl-status");
    this.tip = root.querySelector(".tl-tip");
    this.info = root.querySelector(".tl-info");
    this.data = null;          // the last window from the server
    this.boxes = new Map();    // lane id -> boxes of the last window ({rows, at}: see boxTable)
    this.groups = null;        // the catalogue (from the first window; stable)
    this.collapsed = new Set();
    this.view = null;          // [start_ns, end_ns] on the run clock
    this.origin = null;        // tick origin on the run clock
    this.highlights = [];      // [{start_ns, end_ns, lanes: [lane ids] | null}] on the run clock
    this.selection = null;     // the select.json answer for the last clicked kernel
    this.mouseF = 0.5;
    this.timer = null;
    this.drag = null;
    this.legend();
    this.bind();
    this.load(null, null);
  }

  Timeline.prototype.legend = function () {
    const box = this.root.querySelector(".tl-legend");
    if (!box) return;
    for (const [cat, label] of LEGEND) {
      const item = GP.el("span", { class: "tl-key", "data-cat": cat });
      item.appendChild(GP.el("i", { style: null })).style.background = COLORS[cat];
      item.appendChild(document.createTextNode(label));
      box.appendChild(item);
    }
    for (const [name, label] of [["warmup", "warm-up phase"], ["steady", "steady / work phase"], ["epilogue", "epilogue"], ["startup", "start-up / teardown"]]) {
      const item = GP.el("span", { class: "tl-key", "data-phase": name });
      item.appendChild(GP.el("i", { style: null })).style.background = PHASE_COLORS[name].replace(/[\d.]+\)$/, "0.6)");
      item.appendChild(document.createTextNode(label));
      box.appendChild(item);
    }
    const win = GP.el("span", { class: "tl-key", "data-phase": "window" });
    win.appendChild(GP.el("i", { style: null })).style.background = WINDOW_COLOR;
    win.appendChild(document.createTextNode("analysis window"));
    box.appendChild(win);
    const lp = GP.el("span", { class: "tl-key", "data-phase": "loop" });
    lp.appendChild(GP.el("i", { style: null })).style.background = LOOP_COLOR;
    lp.appendChild(document.createTextNode("loop"));
    box.appendChild(lp);
  };

  Timeline.prototype.bind = function () {
    const self = this;
    const btn = (sel, fn) => { const b = self.root.querySelector(sel); if (b) b.addEventListener("click", fn); };
    btn(".tl-in", () => self.zoom(0.5, 0.5));
    btn(".tl-out", () => self.zoom(2, 0.5));
    btn(".tl-reset", () => self.load(null, null));
    btn(".tl-expand", () => { self.collapsed.clear(); self.draw(); });
    btn(".tl-collapse", () => { (self.groups || []).forEach((g) => self.collapsed.add(g.id)); self.draw(); });
    const origin = this.root.querySelector(".tl-origin");
    if (origin) origin.addEventListener("change", () => { self.setOrigin(origin.value); self.draw(); });
    this.canvas.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      const f = self.fraction(ev);
      if (f === null) return;
      self.zoom(ev.deltaY > 0 ? 1.25 : 0.8, f);
    }, { passive: false });
    this.canvas.addEventListener("mousedown", function (ev) {
      const f = self.fraction(ev);
      if (f !== null) self.drag = { f0: f, f1: f, x: ev.clientX, y: ev.clientY };
    });
    this.canvas.addEventListener("mousemove", function (ev) {
      const f = self.fraction(ev);
      if (f !== null) self.mouseF = f;
      if (self.drag) { self.drag.f1 = Math.max(0, Math.min(1, f ?? 0)); self.draw(); } else self.hover(ev);
    });
    this.canvas.addEventListener("mouseleave", () => { self.tip.hidden = true; });
    this.canvas.addEventListener("click", (ev) => self.click(ev));
    window.addEventListener("mouseup", function (ev) {
      if (!self.drag) return;
      const a = Math.min(self.drag.f0, self.drag.f1), b = Math.max(self.drag.f0, self.drag.f1);
      const moved = Math.abs(ev.clientX - self.drag.x) > 4;
      self.drag = null;
      if (moved && b - a > 0.005) {
        const [s, e] = self.view;
        self.suppressClick = true;
        self.load(s + a * (e - s), s + b * (e - s));
      } else self.draw();
    });
    document.addEventListener("keydown", function (ev) {
      const tag = (ev.target && ev.target.tagName) || "";
      if (/INPUT|SELECT|TEXTAREA/.test(tag) || ev.ctrlKey || ev.metaKey || ev.altKey || !self.view) return;
      const rect = self.canvas.getBoundingClientRect();
      if (rect.bottom < 0 || rect.top > window.innerHeight) return;   // only while the timeline is on screen
      const k = ev.key.toLowerCase();
      if (k === "w") self.zoom(0.7, self.mouseF);
      else if (k === "s") self.zoom(1 / 0.7, self.mouseF);
      else if (k === "a") self.pan(-0.2);
      else if (k === "d") self.pan(0.2);
      else return;
      ev.preventDefault();
    });
    window.addEventListener("resize", () => self.draw());
    document.addEventListener("gp:highlight", (ev) => self.highlight(ev.detail.ranges || [], ev.detail.reportId));
    document.addEventListener("gp:reload", () => self.load(null, null));
  };

  Timeline.prototype.plotWidth = function () { return Math.max(100, this.canvas.clientWidth - LABEL_W); };

  Timeline.prototype.fraction = function (ev) {
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left - LABEL_W;
    if (x < 0) return null;
    return Math.min(1, x / this.plotWidth());
  };

  Timeline.prototype.clampView = function (ns, ne) {
    const ext = this.data && this.data.extent;
    if (ext) {
      const span = Math.min(ne - ns, ext[1] - ext[0]);
      if (ns < ext[0]) { ns = ext[0]; ne = ns + span; }
      if (ne > ext[1]) { ne = ext[1]; ns = ne - span; }
    }
    return [ns, ne];
  };

  Timeline.prototype.zoom = function (factor, at) {
    if (!this.view) return;
    const [s, e] = this.view;
    const span = Math.max(1000, (e - s) * factor);
    const center = s + at * (e - s);
    this.setView(...this.clampView(center - at * span, center - at * span + span));
  };

  Timeline.prototype.pan = function (frac) {
    if (!this.view) return;
    const [s, e] = this.view;
    const d = (e - s) * frac;
    this.setView(...this.clampView(s + d, e + d));
  };

  // Redraw what we have at once at the new scale; fetch the refined window shortly after.
  Timeline.prototype.setView = function (ns, ne) {
    this.view = [ns, ne];
    this.draw();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.load(ns, ne), 150);
  };

  Timeline.prototype.load = async function (start, end) {
    const q = new URLSearchParams({ buckets: String(Math.round(this.plotWidth())) });
    if (start !== null) q.set("start_ns", String(Math.floor(start)));
    if (end !== null) q.set("end_ns", String(Math.ceil(end)));
    this.status.textContent = "loading…";
    const seq = (this.seq = (this.seq || 0) + 1);
    const t0 = performance.now();
    try {
      const data = await GP.fetchJSON(this.url + "?" + q.toString());
      if (seq !== this.seq) return;           // a newer request is on its way
      this.data = data;
      if (!this.groups) {
        this.groups = data.groups;
        // Many ranks: start with each rank collapsed to its GPU activity beyond the first four.
        if (this.groups.length > 4) this.groups.slice(4).forEach((g) => this.collapsed.add(g.id));
      }
      this.phases = new Map((data.phases || []).map((p) => [p.report_id, p]));
      this.boxes = new Map();
      for (const g of data.groups) for (const lane of g.lanes) this.boxes.set(lane.id, boxTable(lane.boxes));
      this.view = [data.start_ns, data.end_ns];
      if (this.origin === null) this.origin = 0;   // the run's start, as evidence times read
      const nLanes = data.groups.reduce((n, g) => n + g.lanes.length, 0);
      this.root.setAttribute("data-boxes", String(data.boxes || 0));
      this.root.setAttribute("data-lanes", String(nLanes));
      this.root.setAttribute("data-groups", String(data.groups.length));
      this.status.textContent = nLanes
        ? `${GP.fmtNs(data.end_ns - data.start_ns)} shown · ${GP.fmtCount(data.activities)} activities in ${GP.fmtCount(data.boxes)} boxes` +
          (data.aligned ? "" : " · reports NOT aligned (a session start time is missing)")
        : "no GPU activity or NVTX ranges in this run";
      const link = this.root.querySelector(".tl-perfetto");
      if (link && this.traceUrl) link.setAttribute("href", `${this.traceUrl}?start_ns=${data.start_ns}&end_ns=${data.end_ns}`);
      this.draw();
      this.root.setAttribute("data-load-ms", String(Math.round(performance.now() - t0)));
      this.root.setAttribute("data-loads", String(Number(this.root.getAttribute("data-loads") || 0) + 1));
    } catch (err) {
      this.status.textContent = "could not load the timeline: " + err.message;
    }
  };

  Timeline.prototype.setOrigin = function (which) {
    const sel = this.selection && this.selection.kernel;
    if (which === "selection" && sel) this.origin = sel.start_ns;
    else if (which === "view" && this.view) this.origin = this.view[0];
    else this.origin = 0;   // the run's start: run clock 0, the earliest report's session start
  };

  // Rows from the catalogue and the collapse state only: the same whatever window is drawn.
  Timeline.prototype.layout = function () {
    let y = AXIS_H;
    const rows = [], byLane = new Map(), groups = [];
    for (const g of this.groups || []) {
      const head = { group: g, y: y, h: GROUP_H, head: true };
      rows.push(head);
      y += GROUP_H + GAP;
      const open = !this.collapsed.has(g.id);
      if (open) {
        for (const lane of g.lanes) {
          const h = lane.kind === "nvtx" ? Math.max(1, lane.depth) * NVTX_H : lane.kind === "api" ? API_H : GPU_H;
          const row = { group: g, lane: lane, y: y, h: h };
          rows.push(row);
          byLane.set(lane.id, row);
          y += h + GAP;
        }
      } else for (const lane of g.lanes) byLane.set(lane.id, head);
      groups.push({ id: g.id, label: g.label, y0: head.y, y1: y });
      y += 4;
    }
    return { rows: rows, byLane: byLane, groups: groups, height: y + 4 };
  };

  Timeline.prototype.x = function (t) {
    const [vs, ve] = this.view;
    return LABEL_W + ((t - vs) / (ve - vs)) * this.plotWidth();
  };

  Timeline.prototype.drawBoxes = function (ctx, row, boxes, alpha) {
    const [vs, ve] = this.view, pw = this.plotWidth(), at = boxes.at;
    for (const b of boxes.rows) {
      const s = b[at.start_ns], e = b[at.end_ns], count = b[at.count], busy = b[at.busy_ns], cat = b[at.category];
      if (e < vs || s > ve) continue;
      const x0 = Math.max(LABEL_W, this.x(s)), x1 = Math.min(LABEL_W + pw, this.x(e));
      const density = count > 1 ? Math.max(0.35, Math.min(1, busy / Math.max(1, e - s))) : 1;
      ctx.globalAlpha = density * alpha;
      ctx.fillStyle = COLORS[cat] || "#718096";
      const nvtx = row.lane && row.lane.kind === "nvtx";
      const y = nvtx ? row.y + (b[at.depth] || 0) * NVTX_H : row.y + (row.head ? 4 : 0);
      const h = nvtx ? NVTX_H - 1 : row.head ? row.h - 8 : row.h;
      ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
      ctx.globalAlpha = 1;
      if (!row.head && x1 - x0 > 48 && count === 1) {
        // Canvas text is pixels, never parsed as markup.
        ctx.save();
        ctx.beginPath();
        ctx.rect(x0, y, x1 - x0, h);
        ctx.clip();
        ctx.fillStyle = "#ffffff";
        ctx.fillText(b[at.name], x0 + 3, y + h - 3);
        ctx.restore();
      }
    }
  };

  Timeline.prototype.fitText = function (ctx, text, width) {
    if (ctx.measureText(text).width <= width) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (ctx.measureText(text.slice(0, mid) + "…").width <= width) lo = mid; else hi = mid - 1;
    }
    return text.slice(0, lo) + "…";
  };

  Timeline.prototype.draw = function () {
    if (!this.groups || !this.view) return;
    const L = (this.lay = this.layout());
    const dpr = window.devicePixelRatio || 1;
    const W = this.canvas.clientWidth, H = L.height;
    LABEL_W = Math.min(230, Math.max(96, Math.round(W * 0.3)));
    this.root.setAttribute("data-label-width", String(LABEL_W));   // the label column, for the layout test
    this.canvas.style.height = H + "px";
    this.canvas.width = W * dpr;
    this.canvas.height = H * dpr;
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    const [vs, ve] = this.view, pw = this.plotWidth();
    // Ticks relative to the origin, as many as fit.
    const step = niceStep(ve - vs, Math.max(2, Math.floor(pw / 110)));
    const origin = this.origin ?? vs;
    const ticks = [];
    for (let k = Math.ceil((vs - origin) / step); origin + k * step <= ve; k++) ticks.push(origin + k * step);
    ctx.strokeStyle = "#edf2f7";
    ctx.fillStyle = "#4a5568";
    let labelEnd = -Infinity;
    for (const t of ticks) {
      const x = this.x(t);
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - 4); ctx.lineTo(x, H); ctx.stroke();
      const label = tickLabel(t - origin, step), w = ctx.measureText(label).width;
      const lx = Math.min(x + 2, W - w - 4);   // the last one kept inside the canvas
      if (lx < labelEnd + 8) continue;         // ...unless it would cover the one before
      ctx.fillText(label, lx, 14);
      labelEnd = lx + w;
    }
    this.root.setAttribute("data-ticks", JSON.stringify(ticks.map((t) => tickLabel(t - origin, step))));
    this.root.setAttribute("data-tick-step", String(step));
    this.root.setAttribute("data-tick-rel", JSON.stringify(ticks.map((t) => t - origin)));
    // Row backgrounds and labels, then each rank's phase bands, then the activity on top.
    for (const row of L.rows) {
      if (row.head) {
        ctx.fillStyle = "#edf2f7";
        ctx.fillRect(0, row.y, W, row.h);
        ctx.fillStyle = "#1a202c";
        ctx.font = "600 12px system-ui, sans-serif";
        const mark = this.collapsed.has(row.group.id) ? "▸ " : "▾ ";
        ctx.fillText(this.fitText(ctx, mark + row.group.label, LABEL_W - 8), 4, row.y + 14);
        ctx.font = "11px system-ui, sans-serif";
        continue;
      }
      ctx.fillStyle = "#f7fafc";
      ctx.fillRect(LABEL_W, row.y, pw, row.h);
      ctx.fillStyle = "#2d3748";
      ctx.fillText(this.fitText(ctx, row.lane.label, LABEL_W - 18), 14, row.y + Math.min(row.h, 14) - 3);
    }
    this.drawPhases(ctx, L);
    for (const row of L.rows) {
      if (row.head) {
        if (this.collapsed.has(row.group.id)) {
          for (const lane of row.group.lanes) if (lane.kind === "gpu") this.drawBoxes(ctx, row, this.boxes.get(lane.id) || NO_BOXES, 1);
        }
        continue;
      }
      this.drawBoxes(ctx, row, this.boxes.get(row.lane.id) || NO_BOXES, 1);
    }
    this.drawMarks(ctx, L, H);
    if (this.drag) {
      ctx.fillStyle = "rgba(43, 108, 176, 0.15)";
      const a = Math.min(this.drag.f0, this.drag.f1), b = Math.max(this.drag.f0, this.drag.f1);
      ctx.fillRect(LABEL_W + a * pw, AXIS_H, (b - a) * pw, H - AXIS_H);
    }
    this.root.setAttribute("data-layout", JSON.stringify(L.groups));
  };

  // The phases of a group's report on the run clock, and the analysis window its rules used (the whole
  // report when the window has no bounds).
  Timeline.prototype.phasesOf = function (group) {
    const item = this.phases && this.phases.get(group.report_id);
    if (!item) return null;
    const phases = (item.phases || []).filter((p) => p.end_ns > p.start_ns);
    let win = null;
    if (item.window) {
      const w = item.window;
      const bounded = w.start_ns !== null && w.end_ns !== null;
      const s = bounded ? w.start_ns : Math.min(...phases.map((p) => p.start_ns));
      const e = bounded ? w.end_ns : Math.max(...phases.map((p) => p.end_ns));
      if (isFinite(s) && isFinite(e) && e > s) win = { start_ns: s, end_ns: e, spec: w.spec, phase: w.phase, reason: w.reason };
    }
    const loops = (item.loops || []).filter((l) => l.end_ns > l.start_ns);
    return { phases: phases, window: win, loops: loops };
  };

  // Shaded bands per phase over each rank's rows (labels in the rank's header row), and the analysis
  // window as a bar under the header with dashed edges through the rank's lanes.
  Timeline.prototype.drawPhases = function (ctx, L) {
    const pw = this.plotWidth(), drawn = [], windows = [], loops = [];
    for (const lg of L.groups) {
      const g = (this.groups || []).find((x) => x.id === lg.id);
      const ph = g && this.phasesOf(g);
      if (!ph) continue;
      const y0 = lg.y0, y1 = lg.y1 - GAP;
      for (const p of ph.phases) {
        const x0 = Math.max(LABEL_W, this.x(p.start_ns)), x1 = Math.min(LABEL_W + pw, this.x(p.end_ns));
        if (p.end_ns < this.view[0] || p.start_ns > this.view[1]) continue;
        ctx.fillStyle = PHASE_COLORS[p.name] || PHASE_COLORS.whole;
        ctx.fillRect(x0, y0, Math.max(1, x1 - x0), y1 - y0);
        ctx.strokeStyle = "rgba(113, 128, 150, 0.5)";
        ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(Math.round(x0) + 0.5, y0); ctx.lineTo(Math.round(x0) + 0.5, y1); ctx.stroke();
        if (x1 - x0 > 30) {
          ctx.save();
          ctx.beginPath(); ctx.rect(x0, y0, x1 - x0, GROUP_H); ctx.clip();
          ctx.fillStyle = "#4a5568";
          ctx.font = "italic 10px system-ui, sans-serif";
          ctx.fillText(this.fitText(ctx, p.name, x1 - x0 - 6), x0 + 3, y0 + GROUP_H - 5);
          ctx.restore();
        }
        drawn.push({ group: lg.label, name: p.name, x0: Math.round(x0), x1: Math.round(x1) });
      }
      const w = ph.window;
      if (w) {
        const x0 = Math.max(LABEL_W, this.x(w.start_ns)), x1 = Math.min(LABEL_W + pw, this.x(w.end_ns));
        if (x1 > LABEL_W && x0 < LABEL_W + pw) {
          ctx.fillStyle = WINDOW_COLOR;
          ctx.fillRect(x0, y0 + GROUP_H - 3, Math.max(2, x1 - x0), 3);
          ctx.strokeStyle = WINDOW_COLOR;
          ctx.setLineDash([4, 3]);
          for (const [t, x] of [[w.start_ns, x0], [w.end_ns, x1]]) {
            if (t < this.view[0] || t > this.view[1]) continue;
            ctx.beginPath(); ctx.moveTo(Math.round(x) + 0.5, y0); ctx.lineTo(Math.round(x) + 0.5, y1); ctx.stroke();
          }
          ctx.setLineDash([]);
          windows.push({ group: lg.label, spec: w.spec, phase: w.phase, x0: Math.round(x0), x1: Math.round(x1) });
        }
      }
      for (const l of ph.loops || []) {
        if (l.end_ns < this.view[0] || l.start_ns > this.view[1]) continue;
        const x0 = Math.max(LABEL_W, this.x(l.start_ns)), x1 = Math.min(LABEL_W + pw, this.x(l.end_ns));
        ctx.fillStyle = LOOP_COLOR;
        ctx.fillRect(x0, y0 + 1, Math.max(2, x1 - x0), 2);
        ctx.fillRect(x0, y0 + 1, 1, 6);
        ctx.fillRect(Math.max(x0, x1 - 1), y0 + 1, 1, 6);
        const label = `loop ${l.index} · ${GP.fmtCount(l.count)} steps`;
        ctx.font = "10px system-ui, sans-serif";
        const lw = ctx.measureText(label).width;
        if (x1 - x0 > lw + 70) ctx.fillText(label, x1 - lw - 3, y0 + 11);   // clear of the phase's name on the left
        loops.push({ group: lg.label, index: l.index, x0: Math.round(x0), x1: Math.round(x1) });
      }
    }
    this.root.setAttribute("data-loops", JSON.stringify(loops));
    this.root.setAttribute("data-phases", JSON.stringify(drawn));
    this.root.setAttribute("data-windows", JSON.stringify(windows));
  };

  // The phase (and whether it is in the analysis window) at run-clock time t for a group.
  Timeline.prototype.phaseAt = function (group, t) {
    const ph = this.phasesOf(group);
    if (!ph) return null;
    const p = ph.phases.find((x) => x.start_ns <= t && t <= x.end_ns);
    if (!p) return null;
    const w = ph.window;
    const inWin = w && w.start_ns <= t && t <= w.end_ns;
    return `${p.name} phase · ${GP.fmtNs(p.end_ns - p.start_ns)} · ${p.reason}` +
      (w ? (inWin ? ` · inside the analysis window (${w.spec}: ${w.phase})` : ` · outside the analysis window (${w.spec})`) : "");
  };

  Timeline.prototype.outline = function (ctx, row, s, e, color) {
    const pw = this.plotWidth();
    const x0 = Math.max(LABEL_W, this.x(s)), x1 = Math.min(LABEL_W + pw, this.x(e));
    if (x1 < LABEL_W || x0 > LABEL_W + pw) return false;
    ctx.fillStyle = color.replace("1)", "0.25)");
    ctx.fillRect(x0, row.y - 1, Math.max(2, x1 - x0), row.h + 2);
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.strokeRect(x0, row.y - 1, Math.max(2, x1 - x0), row.h + 2);
    return true;
  };

  // Finding highlights, the selected kernel, its launch arrow and its collective on every rank.
  Timeline.prototype.drawMarks = function (ctx, L, H) {
    let shown = 0;
    for (const hl of this.highlights) {
      const rows = hl.lanes ? hl.lanes.map((id) => L.byLane.get(id)).filter(Boolean) : [];
      const targets = rows.length ? rows : [{ y: AXIS_H, h: H - AXIS_H - 4 }];
      for (const r of targets) if (this.outline(ctx, r, hl.start_ns, hl.end_ns, "rgba(229, 62, 62, 1)")) shown++;
    }
    this.root.setAttribute("data-highlighted", String(this.highlights.length ? Math.max(1, shown) : 0));
    const sel = this.selection;
    let instances = 0;
    if (sel && sel.kernel) {
      const coll = sel.collective;
      if (coll) {
        for (const inst of coll.instances) {
          const row = L.byLane.get(inst.lane_id);
          if (row && this.outline(ctx, row, inst.start_ns, inst.end_ns, "rgba(214, 158, 46, 1)")) {
            instances++;
            ctx.fillStyle = "#744210";
            const label = "+" + GP.fmtNs(inst.arrival_ns);
            const lx = Math.min(Math.max(LABEL_W, this.x(inst.start_ns)) + 2, LABEL_W + this.plotWidth() - ctx.measureText(label).width - 2);
            ctx.fillText(label, lx, row.y + row.h + 10);
          }
        }
      }
      const krow = L.byLane.get(sel.kernel.lane_id);
      if (krow) this.outline(ctx, krow, sel.kernel.start_ns, sel.kernel.end_ns, "rgba(49, 130, 206, 1)");
      const lrow = sel.launch && L.byLane.get(sel.launch.lane_id);
      if (lrow && krow) {
        this.outline(ctx, lrow, sel.launch.start_ns, sel.launch.end_ns, "rgba(49, 130, 206, 1)");
        const ax = this.x(sel.launch.start_ns), ay = lrow.y + lrow.h / 2;
        const bx = this.x(sel.kernel.start_ns), by = krow.y + krow.h / 2;
        ctx.strokeStyle = "#2c5282";
        ctx.lineWidth = 1.5;
        ctx.beginPath(); ctx.moveTo(ax, ay); ctx.lineTo(bx, by); ctx.stroke();
        const ang = Math.atan2(by - ay, bx - ax);
        ctx.beginPath();
        ctx.moveTo(bx, by);
        ctx.lineTo(bx - 8 * Math.cos(ang - 0.4), by - 8 * Math.sin(ang - 0.4));
        ctx.lineTo(bx - 8 * Math.cos(ang + 0.4), by - 8 * Math.sin(ang + 0.4));
        ctx.closePath();
        ctx.fillStyle = "#2c5282";
        ctx.fill();
        this.root.setAttribute("data-flow", "1");
      }
    }
    this.root.setAttribute("data-selected-instances", String(instances));
  };

  // The row and the box under the pointer (boxes of the drawn window).
  Timeline.prototype.pick = function (ev) {
    if (!this.lay) return null;
    const rect = this.canvas.getBoundingClientRect();
    const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    const row = this.lay.rows.find((r) => py >= r.y && py <= r.y + r.h);
    if (!row) return { px: px, py: py };
    if (px < LABEL_W) return { px: px, py: py, row: row, label: true };
    const [vs, ve] = this.view;
    const t = vs + ((px - LABEL_W) / this.plotWidth()) * (ve - vs);
    const tol = (3 * (ve - vs)) / this.plotWidth();
    const lanes = row.head ? row.group.lanes.filter((l) => l.kind === "gpu" && this.collapsed.has(row.group.id)) : [row.lane];
    for (const lane of lanes) {
      const { rows, at } = this.boxes.get(lane.id) || NO_BOXES;
      for (const b of rows) {
        const depthOk = lane.kind !== "nvtx" || Math.floor((py - row.y) / NVTX_H) === (b[at.depth] || 0);
        if (depthOk && b[at.start_ns] - tol <= t && t <= b[at.end_ns] + tol) {
          // The box as a record with named fields.
          const box = {};
          for (const name in at) box[name] = b[at[name]];
          return { px: px, py: py, row: row, lane: lane, box: box, t: t, tol: tol };
        }
      }
    }
    return { px: px, py: py, row: row, t: t, tol: tol };
  };

  Timeline.prototype.hover = function (ev) {
    const hit = this.pick(ev);
    const rect = this.canvas.getBoundingClientRect();
    let text = null;
    if (hit && hit.label) text = hit.row.head ? `${hit.row.group.label} · report ${hit.row.group.report_id} · click to ${this.collapsed.has(hit.row.group.id) ? "expand" : "collapse"}` : `${hit.row.group.label} · ${hit.row.lane.label}`;
    else if (hit && hit.box) {
      const { start_ns: s, end_ns: e, count, busy_ns: busy, category: cat, name } = hit.box;
      text = count > 1
        ? `${count} ${cat} activities (longest: ${name}) · busy ${GP.fmtNs(busy)} in ${GP.fmtNs(e - s)}`
        : `${name} · ${cat} · ${GP.fmtNs(e - s)} at +${GP.fmtNs(s - (this.origin ?? 0))}`;
      text += ` · ${hit.row.group.label}`;
    } else if (hit && hit.row && hit.t !== undefined) {
      const p = this.phaseAt(hit.row.group, hit.t);   // trace text (an NVTX name in a reason): textContent below
      if (p) text = `${p} · ${hit.row.group.label}`;
    }
    if (!text) { this.tip.hidden = true; return; }
    this.tip.textContent = text;
    this.tip.style.left = Math.max(0, Math.min(hit.px + 12, rect.width - 330)) + "px";
    this.tip.style.top = hit.py + 14 + "px";
    this.tip.hidden = false;
  };

  Timeline.prototype.click = async function (ev) {
    if (this.suppressClick) { this.suppressClick = false; return; }
    const hit = this.pick(ev);
    if (!hit || !hit.row) return;
    if (hit.label && hit.row.head) {
      const id = hit.row.group.id;
      if (this.collapsed.has(id)) this.collapsed.delete(id); else this.collapsed.add(id);
      this.draw();
      return;
    }
    if (!hit.lane || hit.lane.kind !== "gpu" || !hit.box) return;
    const g = hit.row.group, lane = hit.lane;
    const q = new URLSearchParams({ report_id: String(g.report_id), t_ns: String(Math.round(hit.t)),
      tol_ns: String(Math.round(hit.tol)) });
    if (g.pid !== null) q.set("pid", String(g.pid));
    if (lane.device !== null) q.set("device", String(lane.device));
    if (lane.stream !== null) q.set("stream", String(lane.stream));
    try {
      this.select(await GP.fetchJSON(this.selectUrl + "?" + q.toString()));
    } catch (err) {
      this.status.textContent = "could not select: " + err.message;
    }
  };

  Timeline.prototype.select = function (sel) {
    this.selection = sel && sel.kernel ? sel : null;
    const origin = this.root.querySelector(".tl-origin");
    if (origin && origin.value === "selection") this.setOrigin("selection");
    this.describe();
    this.draw();
  };

  // The selection in words under the canvas (all trace strings as text).
  Timeline.prototype.describe = function () {
    if (!this.info) return;
    this.info.textContent = "";
    const sel = this.selection;
    if (!sel) { this.info.hidden = true; return; }
    const k = sel.kernel;
    const groupOf = (rid, pid) => (this.groups || []).find((g) => g.report_id === rid && g.pid === pid);
    const who = (rid, pid) => { const g = groupOf(rid, pid); return g ? g.label : `report ${rid} pid ${pid}`; };
    this.info.appendChild(GP.el("p", null, `${k.name} · ${k.category} · ${GP.fmtNs(k.end_ns - k.start_ns)} on ${who(k.report_id, k.pid)}, GPU ${k.device} stream ${k.stream}`));
    if (sel.launch) this.info.appendChild(GP.el("p", { class: "muted" }, `launched by ${sel.launch.name} (tid ${sel.launch.tid}), ${GP.fmtNs(k.start_ns - sel.launch.start_ns)} before the kernel started`));
    const c = sel.collective;
    if (c && c.instances.length) {
      this.info.appendChild(GP.el("p", null, `Collective instance #${c.occurrence + 1} on ${GP.fmtCount(c.instances.length)} process(es): arrival skew ${GP.fmtNs(c.skew_ns)}` + (c.last ? `, last to arrive: ${who(c.last.report_id, c.last.pid)}` : "")));
      const table = GP.el("table", { class: "tl-collective" });
      const head = table.appendChild(GP.el("thead")).appendChild(GP.el("tr"));
      for (const h of ["rank", "arrives after the first", "duration"]) head.appendChild(GP.el("th", null, h));
      const body = table.appendChild(GP.el("tbody"));
      for (const inst of c.instances.slice().sort((a, b) => a.arrival_ns - b.arrival_ns)) {
        const tr = body.appendChild(GP.el("tr"));
        tr.appendChild(GP.el("td", null, who(inst.report_id, inst.pid)));
        tr.appendChild(GP.el("td", { class: "num" }, GP.fmtNs(inst.arrival_ns)));
        tr.appendChild(GP.el("td", { class: "num" }, GP.fmtNs(inst.end_ns - inst.start_ns)));
      }
      this.info.appendChild(table);
    }
    this.info.hidden = false;
  };

  // Ranges of a finding (report-local times) onto the run clock and the lanes of that report.
  Timeline.prototype.highlight = function (ranges, reportId) {
    const run = () => {
      const all = this.groups || [];
      const given = (v) => v !== undefined && v !== null && v !== "";
      // A finding of one report maps through that report; a run-level one (COMM002) through its evidence's rank.
      const groupsFor = (r) => all.filter((g) => given(reportId) ? String(g.report_id) === String(reportId)
        : given(r.rank) ? g.rank === r.rank : true);
      this.highlights = ranges.filter((r) => r.start_ns !== undefined && r.end_ns !== undefined).map((r) => {
        const groups = groupsFor(r);
        const off = groups.length ? groups[0].offset_ns || 0 : 0;
        const lanes = [];
        for (const g of groups) {
          if (given(r.pid) && g.pid !== r.pid) continue;
          for (const lane of g.lanes) {
            if (lane.kind !== "gpu") continue;
            if (given(r.device) && lane.device !== r.device) continue;
            if (given(r.stream) && lane.stream !== r.stream) continue;
            lanes.push(lane.id);
          }
        }
        return { start_ns: r.start_ns + off, end_ns: r.end_ns + off, lanes: lanes };
      });
      if (!this.highlights.length) { this.draw(); return; }
      const s = Math.min(...this.highlights.map((r) => r.start_ns));
      const e = Math.max(...this.highlights.map((r) => r.end_ns));
      const pad = Math.max(1000, (e - s) * 0.15);
      this.load(s - pad, e + pad);
    };
    if (this.groups) run(); else setTimeout(() => this.highlight(ranges, reportId), 200);
  };

  GP.Timeline = Timeline;
  GP.tickLabel = tickLabel;
  GP.niceStep = niceStep;
  GP.onReady(function () {
    document.querySelectorAll("div[data-timeline-url]").forEach((n) => { n.gpTimeline = new Timeline(n); });
  });
})();
