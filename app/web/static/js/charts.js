// SVG charts: the stacked time breakdown per device/rank and trend lines over a job's runs.
"use strict";

(function () {
  const GP = window.GP;

  // Order and colours of the breakdown segments (keys of each row's "segments").
  GP.SEGMENTS = [
    ["compute_ns", "compute", "#2b6cb0"],
    ["overlapped_comm_ns", "overlapped comm", "#68d391"],
    ["exposed_comm_ns", "exposed comm", "#e53e3e"],
    ["memory_ns", "memory only", "#d69e2e"],
    ["idle_ns", "idle", "#cbd5e0"],
  ];

  // rows: [{label, total_ns, segments: {compute_ns: .., ...}}]; one horizontal 100 % bar per row.
  GP.breakdownChart = function (container, rows) {
    container.textContent = "";
    if (!rows || !rows.length) {
      container.appendChild(GP.el("p", { class: "muted" }, "No GPU activity to break down."));
      return;
    }
    const labelW = 190, barW = 620, rowH = 26, gap = 8, legendH = 28;
    const height = legendH + rows.length * (rowH + gap);
    const root = GP.svg("svg", {
      class: "breakdown", role: "img", preserveAspectRatio: "xMinYMin meet",
      viewBox: `0 0 ${labelW + barW + 90} ${height}`, "aria-label": "GPU time breakdown",
    });
    let lx = labelW;
    for (const [, name, color] of GP.SEGMENTS) {
      root.appendChild(GP.svg("rect", { x: lx, y: 6, width: 12, height: 12, fill: color }));
      root.appendChild(GP.svg("text", { x: lx + 16, y: 16, class: "legend" }, name));
      lx += 24 + name.length * 7;
    }
    // Each bar as long as its row's time against the longest row: 12 ms never looks like 39 ms.
    const sumOf = (seg) => GP.SEGMENTS.reduce((s, [k]) => s + Math.max(0, (seg || {})[k] || 0), 0);
    const longest = Math.max(...rows.map((r) => sumOf(r.segments)), 0);
    rows.forEach(function (row, i) {
      const y = legendH + i * (rowH + gap);
      const seg = row.segments || {};
      const total = sumOf(seg);
      const scale = longest ? total / longest : 0;
      root.appendChild(GP.svg("text", { x: labelW - 8, y: y + rowH * 0.68, class: "label", "text-anchor": "end" },
        row.label));
      let x = labelW;
      for (const [key, name, color] of GP.SEGMENTS) {
        const v = Math.max(0, seg[key] || 0);
        if (!total || !v) continue;
        const w = (v / total) * barW * scale;
        const rect = GP.svg("rect", { x: x, y: y, width: Math.max(w, 0.5), height: rowH, fill: color,
          class: "seg", "data-segment": key });
        rect.appendChild(GP.svg("title", {}, `${row.label} · ${name}: ${GP.fmtNs(v)} (${GP.fmtPct(100 * v / total)} of this row)`));
        root.appendChild(rect);
        x += w;
      }
      root.appendChild(GP.svg("text", { x: labelW + total / (longest || 1) * barW + 6, y: y + rowH * 0.68, class: "label" },
        GP.fmtNs(row.total_ns !== undefined ? row.total_ns : total)));
    });
    container.appendChild(root);
  };

  // series: {label, unit: "pct"|"ns", points: [{x_label, value, href, regressed}]}
  GP.trendChart = function (container, series) {
    container.textContent = "";
    const pts = (series.points || []).filter((p) => p.value !== null && p.value !== undefined);
    const W = 560, H = 220, L = 64, R = 12, T = 24, B = 44;
    // A group, not an image: its points are links (an image may hold nothing focusable).
    const root = GP.svg("svg", { class: "trend", viewBox: `0 0 ${W} ${H}`, role: "group",
      "aria-label": series.label });
    root.appendChild(GP.svg("text", { x: L, y: 14, class: "title" }, series.label));
    if (!pts.length) {
      container.hidden = true;         // an empty chart says nothing: hidden
      return;
    }
    container.hidden = false;
    const vals = pts.map((p) => p.value);
    let lo = Math.min(...vals), hi = Math.max(...vals);
    if (series.unit === "pct") { lo = Math.min(lo, 0); hi = Math.max(hi, 100); }
    if (hi === lo) { hi = lo === 0 ? (series.unit === "pct" ? 100 : 1000) : lo * 1.2; }
    lo = Math.min(lo, 0);
    const sx = (i) => L + (pts.length === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (pts.length - 1));
    const sy = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    const fmt = series.unit === "pct" ? GP.fmtPct : GP.fmtNs;
    for (const v of [lo, (lo + hi) / 2, hi]) {
      root.appendChild(GP.svg("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v), class: "grid" }));
      root.appendChild(GP.svg("text", { x: L - 4, y: sy(v) + 4, "text-anchor": "end", class: "axis" }, fmt(v)));
    }
    // x axis: date (time of day when every run is of one day) and short git sha under up to 8 evenly spread runs.
    const every = Math.max(1, Math.ceil(pts.length / 8));
    const oneDay = new Set(pts.map((p) => p.date)).size === 1 && pts.every((p) => p.time);
    pts.forEach(function (p, i) {
      if (i % every && i !== pts.length - 1) return;
      // The first and last labels align inward so they are neither cut nor on the y axis' labels.
      const x = sx(i), y = H - B + 18;
      const anchor = pts.length > 1 && i === 0 ? "start" : pts.length > 1 && i === pts.length - 1 ? "end" : "middle";
      root.appendChild(GP.svg("text", { x: x, y: y, "text-anchor": anchor, class: "axis xdate" },
        (oneDay ? p.time : p.date) || ""));
      if (p.sha) root.appendChild(GP.svg("text", { x: x, y: y + 13, "text-anchor": anchor, class: "axis xsha" }, p.sha));
    });
    const d = pts.map((p, i) => (i ? "L" : "M") + sx(i).toFixed(1) + " " + sy(p.value).toFixed(1)).join(" ");
    root.appendChild(GP.svg("path", { d: d, class: "line" }));
    pts.forEach(function (p, i) {
      const c = GP.svg("circle", { cx: sx(i), cy: sy(p.value), r: p.regressed ? 6 : 3.5,
        class: p.regressed ? "pt regressed" : "pt" });
      c.appendChild(GP.svg("title", {}, `${p.x_label}: ${fmt(p.value)}${p.regressed ? " — regressed vs recent median" : ""}`));
      if (p.href) {
        const a = GP.svg("a", { href: p.href, "aria-label": `${p.x_label}: ${fmt(p.value)}` });
        a.appendChild(c);
        root.appendChild(a);
      } else {
        root.appendChild(c);
      }
    });
    container.appendChild(root);
  };

  GP.onReady(function () {
    document.querySelectorAll("[data-breakdown]").forEach((n) => GP.breakdownChart(n, GP.json(n, "breakdown")));
    document.querySelectorAll("[data-trend]").forEach((n) => GP.trendChart(n, GP.json(n, "trend")));
    // The job page's metric picker: one chart redrawn from the series embedded in the page.
    const picked = document.getElementById("trend-picked"), pick = document.getElementById("trend-metric");
    if (picked && pick) {
      const all = GP.json(picked, "metrics") || {};
      const draw = () => { GP.trendChart(picked, all[pick.value] || { label: "", points: [] }); picked.dataset.metric = pick.value; };
      pick.addEventListener("change", draw);
      draw();
    }
    // The job page's ncu kernels: the chosen kernel's KPIs over the runs that profiled it.
    const ncu = document.getElementById("ncu-trends"), kernel = document.getElementById("ncu-kernel");
    if (ncu && kernel) {
      const kernels = (GP.json(ncu, "ncu") || {}).kernels || [];
      const drawNcu = function () {
        const k = kernels[Number(kernel.value)] || { series: {} };
        for (const kpi of ["duration", "sm_pct", "mem_pct", "occupancy_pct"]) {
          const box = document.getElementById("ncu-trend-" + kpi);
          if (box) GP.trendChart(box, k.series[kpi] || { label: "", points: [] });
        }
        ncu.dataset.kernel = k.name || "";
      };
      kernel.addEventListener("change", drawNcu);
      drawNcu();
    }
  });
})();
