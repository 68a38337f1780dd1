// Zoomable canvas timeline: lanes per device/stream and NVTX thread, fetched as a downsampled window.
"use strict";

(function () {
  const GP = window.GP;
  const COLORS = { compute: "#2b6cb0", nccl: "#dd6b20", memcpy: "#38a169", memset: "#319795", nvtx: "#805ad5" };
  const LABEL_W = 210, LANE_H = 18, NVTX_H = 14, AXIS_H = 22;

  function Timeline(root) {
    this.root = root;
    this.url = root.getAttribute("data-timeline-url");
    this.traceUrl = root.getAttribute("data-trace-url");
    this.canvas = root.querySelector("canvas");
    this.status = root.querySelector(".tl-status");
    this.tip = root.querySelector(".tl-tip");
    this.data = null;
    this.view = null;        // [start_ns, end_ns] currently drawn
    this.highlights = [];    // [{start_ns, end_ns, device, stream}]
    this.timer = null;
    this.drag = null;
    this.bind();
    this.load(null, null);
  }

  Timeline.prototype.bind = function () {
    const self = this;
    const btn = (sel, fn) => { const b = self.root.querySelector(sel); if (b) b.addEventListener("click", fn); };
    btn(".tl-in", () => self.zoom(0.5, 0.5));
    btn(".tl-out", () => self.zoom(2, 0.5));
    btn(".tl-reset", () => self.load(null, null));
    this.canvas.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      const f = self.fraction(ev);
      if (f === null) return;
      self.zoom(ev.deltaY > 0 ? 1.25 : 0.8, f);
    }, { passive: false });
    this.canvas.addEventListener("mousedown", function (ev) {
      const f = self.fraction(ev);
      if (f !== null) self.drag = { f0: f, f1: f };
    });
    this.canvas.addEventListener("mousemove", function (ev) {
      if (self.drag) { self.drag.f1 = Math.max(0, Math.min(1, self.fraction(ev) ?? 0)); self.draw(); }
      else self.hover(ev);
    });
    this.canvas.addEventListener("mouseleave", () => { self.tip.hidden = true; });
    window.addEventListener("mouseup", function () {
      if (!self.drag) return;
      const a = Math.min(self.drag.f0, self.drag.f1), b = Math.max(self.drag.f0, self.drag.f1);
      self.drag = null;
      if (b - a > 0.005) {
        const [s, e] = self.view;
        self.load(s + a * (e - s), s + b * (e - s));
      } else self.draw();
    });
    window.addEventListener("resize", () => self.draw());
    document.addEventListener("gp:highlight", function (ev) { self.highlight(ev.detail.ranges || []); });
    document.addEventListener("gp:reload", function () { self.load(null, null); });
  };

  Timeline.prototype.plotWidth = function () {
    return Math.max(100, this.canvas.clientWidth - LABEL_W);
  };

  Timeline.prototype.fraction = function (ev) {
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left - LABEL_W;
    if (x < 0) return null;
    return Math.min(1, x / this.plotWidth());
  };

  Timeline.prototype.zoom = function (factor, at) {
    if (!this.view) return;
    const [s, e] = this.view;
    const span = Math.max(1000, (e - s) * factor);
    const center = s + at * (e - s);
    let ns = center - at * span, ne = ns + span;
    const ext = this.data && this.data.extent;
    if (ext) { if (ns < ext[0]) { ne += ext[0] - ns; ns = ext[0]; } if (ne > ext[1]) ne = ext[1]; }
    this.view = [ns, ne];
    this.draw();                      // redraw what we have at once, refine after the fetch
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.load(ns, ne), 200);
  };

  Timeline.prototype.load = async function (start, end) {
    const q = new URLSearchParams({ buckets: String(Math.round(this.plotWidth())) });
    if (start !== null) q.set("start_ns", String(Math.floor(start)));
    if (end !== null) q.set("end_ns", String(Math.ceil(end)));
    this.status.textContent = "loading…";
    try {
      const data = await GP.fetchJSON(this.url + "?" + q.toString());
      this.data = data;
      this.view = [data.start_ns, data.end_ns];
      this.root.setAttribute("data-boxes", String(data.boxes || 0));
      this.root.setAttribute("data-lanes", String(data.lanes.length));
      this.status.textContent = data.lanes.length
        ? `${GP.fmtNs(data.start_ns)} – ${GP.fmtNs(data.end_ns)} · ${data.activities} activities in ${data.boxes} boxes`
        : "no GPU activity or NVTX ranges in this report";
      const link = this.root.querySelector(".tl-perfetto");
      if (link && this.traceUrl) link.setAttribute("href", `${this.traceUrl}?start_ns=${data.start_ns}&end_ns=${data.end_ns}`);
      this.draw();
    } catch (err) {
      this.status.textContent = "could not load the timeline: " + err.message;
    }
  };

  Timeline.prototype.layout = function () {
    let y = AXIS_H;
    const rows = [];
    for (const lane of this.data.lanes) {
      const h = lane.kind === "nvtx" ? Math.max(1, lane.depth) * NVTX_H : LANE_H;
      rows.push({ lane: lane, y: y, h: h });
      y += h + 4;
    }
    return { rows: rows, height: y + 4 };
  };

  Timeline.prototype.draw = function () {
    if (!this.data || !this.view) return;
    const { rows, height } = this.layout();
    const dpr = window.devicePixelRatio || 1;
    const W = this.canvas.clientWidth;
    this.canvas.style.height = height + "px";
    this.canvas.width = W * dpr;
    this.canvas.height = height * dpr;
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, W, height);
    const [vs, ve] = this.view;
    const pw = this.plotWidth();
    const x = (t) => LABEL_W + ((t - vs) / (ve - vs)) * pw;
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#4a5568";
    for (let i = 0; i <= 4; i++) {
      const t = vs + (i * (ve - vs)) / 4;
      ctx.fillText(GP.fmtNs(t), Math.min(x(t), W - 60), 14);
    }
    this.hitRows = rows;
    for (const row of rows) {
      ctx.fillStyle = "#f7fafc";
      ctx.fillRect(LABEL_W, row.y, pw, row.h);
      ctx.fillStyle = "#2d3748";
      ctx.fillText(row.lane.label.slice(0, 34), 4, row.y + 12);
      for (const b of row.lane.boxes) {
        const [s, e, count, busy, cat] = b;
        if (e < vs || s > ve) continue;
        const x0 = Math.max(LABEL_W, x(s)), x1 = Math.min(LABEL_W + pw, x(e));
        const density = count > 1 ? Math.max(0.35, Math.min(1, busy / Math.max(1, e - s))) : 1;
        ctx.globalAlpha = density;
        ctx.fillStyle = COLORS[cat] || "#718096";
        const y = row.lane.kind === "nvtx" ? row.y + (b[6] || 0) * NVTX_H : row.y;
        const h = row.lane.kind === "nvtx" ? NVTX_H - 2 : row.h;
        ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
        ctx.globalAlpha = 1;
        if (x1 - x0 > 48 && count === 1) {
          // Label wide boxes; canvas text is drawn as pixels, never parsed as markup.
          ctx.save();
          ctx.beginPath();
          ctx.rect(x0, y, x1 - x0, h);
          ctx.clip();
          ctx.fillStyle = "#ffffff";
          ctx.fillText(b[5], x0 + 3, y + h - 3);
          ctx.restore();
        }
      }
    }
    for (const hl of this.highlights) {
      if (hl.end_ns < vs || hl.start_ns > ve) continue;
      const x0 = Math.max(LABEL_W, x(hl.start_ns)), x1 = Math.min(LABEL_W + pw, x(hl.end_ns));
      const hit = rows.filter((r) => r.lane.kind === "gpu" && (hl.device === undefined || hl.device === null ||
        r.lane.device === hl.device) && (hl.stream === undefined || hl.stream === null || r.lane.stream === hl.stream));
      const targets = hit.length ? hit : [{ y: AXIS_H, h: height - AXIS_H - 4 }];
      for (const r of targets) {
        ctx.fillStyle = "rgba(229, 62, 62, 0.25)";
        ctx.fillRect(x0, r.y - 1, Math.max(2, x1 - x0), r.h + 2);
        ctx.strokeStyle = "#e53e3e";
        ctx.lineWidth = 1.5;
        ctx.strokeRect(x0, r.y - 1, Math.max(2, x1 - x0), r.h + 2);
      }
    }
    if (this.drag) {
      ctx.fillStyle = "rgba(43, 108, 176, 0.15)";
      const a = Math.min(this.drag.f0, this.drag.f1), b = Math.max(this.drag.f0, this.drag.f1);
      ctx.fillRect(LABEL_W + a * pw, AXIS_H, (b - a) * pw, height - AXIS_H);
    }
    this.root.setAttribute("data-highlighted", String(this.highlights.length));
  };

  Timeline.prototype.hover = function (ev) {
    if (!this.data || !this.hitRows) return;
    const rect = this.canvas.getBoundingClientRect();
    const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    const [vs, ve] = this.view;
    const t = vs + ((px - LABEL_W) / this.plotWidth()) * (ve - vs);
    const tol = (3 * (ve - vs)) / this.plotWidth();
    let found = null;
    for (const row of this.hitRows) {
      if (py < row.y || py > row.y + row.h) continue;
      for (const b of row.lane.boxes) {
        const depthOk = row.lane.kind !== "nvtx" || Math.floor((py - row.y) / NVTX_H) === (b[6] || 0);
        if (depthOk && b[0] - tol <= t && t <= b[1] + tol) { found = { lane: row.lane, box: b }; break; }
      }
    }
    if (!found || px < LABEL_W) { this.tip.hidden = true; return; }
    const [s, e, count, busy, cat, name] = found.box;
    this.tip.textContent = count > 1
      ? `${count} ${cat} activities (longest: ${name}) · busy ${GP.fmtNs(busy)} in ${GP.fmtNs(e - s)}`
      : `${name} · ${cat} · ${GP.fmtNs(e - s)} at ${GP.fmtNs(s)}`;
    this.tip.style.left = Math.min(px + 12, rect.width - 320) + "px";
    this.tip.style.top = py + 14 + "px";
    this.tip.hidden = false;
  };

  Timeline.prototype.highlight = function (ranges) {
    this.highlights = ranges.filter((r) => r.start_ns !== undefined && r.end_ns !== undefined);
    if (!this.highlights.length) { this.draw(); return; }
    const s = Math.min(...this.highlights.map((r) => r.start_ns));
    const e = Math.max(...this.highlights.map((r) => r.end_ns));
    const pad = Math.max(1000, (e - s) * 0.15);
    this.load(s - pad, e + pad);
  };

  // Point the timeline at another report of the run (the report picker, or a finding of another rank).
  Timeline.prototype.setSource = function (url, traceUrl, reportId) {
    this.url = url;
    this.traceUrl = traceUrl;
    this.root.setAttribute("data-report-id", String(reportId));
    this.data = null;
    this.highlights = [];
  };

  GP.Timeline = Timeline;
  GP.onReady(function () {
    document.querySelectorAll("div[data-timeline-url]").forEach((n) => { n.gpTimeline = new Timeline(n); });
  });
})();
