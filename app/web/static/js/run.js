// Run page: findings drive the timeline highlight; the kernel and NVTX tables load from a JSON route.
"use strict";

(function () {
  const GP = window.GP;

  // Ranges of a finding (times of its report) onto the run timeline, which maps them to the run clock.
  function highlight(ranges, reportId, scroll) {
    document.dispatchEvent(new CustomEvent("gp:highlight", { detail: { ranges: ranges, reportId: reportId } }));
    const node = document.getElementById("timeline");
    if (node && scroll) node.scrollIntoView({ behavior: "smooth", block: "center" });
  }

  // Evidence start times with the precision the timeline shows them at when a row is clicked (zoomed to
  // that row): the decimals of a tick step over the row's duration, and enough to tell the table's rows
  // apart ("99.421 3 s", "99.421 9 s", not "99.4 s" twice). Raw ns stay in data-ns.
  function preciseStarts(table) {
    const rows = Array.from(table.querySelectorAll("tbody tr")).map(function (tr) {
      const td = tr.querySelector("td.evidence-at");
      const range = GP.json(tr, "range");
      const at = td && td.getAttribute("data-ns") !== "" ? Number(td.getAttribute("data-ns")) : NaN;
      return { td: td, at: at, dur: range ? range.end_ns - range.start_ns : NaN };
    }).filter((r) => r.td && isFinite(r.at));
    if (!rows.length || !GP.tickLabel || !GP.niceStep) return;
    const starts = rows.map((r) => r.at).sort((a, b) => a - b);
    let gap = Infinity;
    for (let i = 1; i < starts.length; i++) if (starts[i] > starts[i - 1]) gap = Math.min(gap, starts[i] - starts[i - 1]);
    for (const r of rows) {
      const span = Math.max(1, Math.min(isFinite(r.dur) && r.dur > 0 ? r.dur : Infinity, gap));
      const text = isFinite(span) ? GP.tickLabel(r.at, GP.niceStep(span, 5)).replace(/^\+/, "") : GP.fmtNs(r.at);
      r.td.textContent = text;
      r.td.setAttribute("data-unit", text.split(" ").pop());
    }
  }

  // A finding whose evidence is totals per call name (MEM006, HOST001 ...): the calls of those names that held
  // the GPU idle in the window, fetched once, the ones with the most idle inside highlighted.
  async function showCalls(btn, reportId) {
    const note = btn.parentElement.querySelector(".timeline-note");
    if (!btn._calls) {
      const q = new URLSearchParams();
      (GP.json(btn, "names") || []).forEach((n) => q.append("name", n));
      try {
        btn._calls = await GP.fetchJSON(btn.getAttribute("data-calls-url") + "?" + q);
      } catch (err) {
        if (note) note.textContent = "lookup failed: " + err.message;
        return;
      }
    }
    const res = btn._calls;
    if (!res.longest.length) {
      if (note) note.textContent = "none of the calls it names held the GPU idle in the analysis window";
      return;
    }
    if (note) {
      const shown = res.longest.length;
      note.textContent = `${GP.fmtCount(res.count)} call${res.count === 1 ? "" : "s"} held the GPU idle` +
        (shown < res.count ? `; the ${GP.fmtCount(shown)} with the most idle inside are highlighted` : "");
    }
    highlight(res.longest, reportId, true);
  }

  function initFindings() {
    document.querySelectorAll("table.evidence").forEach(preciseStarts);
    document.querySelectorAll("details.finding").forEach(function (d) {
      const ranges = GP.json(d, "ranges") || [];
      const reportId = d.getAttribute("data-report-id");
      const btn = d.querySelector(".show-on-timeline");
      if (btn && btn.hasAttribute("data-calls-url")) btn.addEventListener("click", () => showCalls(btn, reportId));
      else if (btn) btn.addEventListener("click", () => highlight(ranges, reportId, true));
      d.addEventListener("toggle", function () {
        if (d.open && ranges.length) highlight(ranges, reportId, false);
      });
      // One evidence row: zoom the timeline to it.
      d.querySelectorAll("tr.zoomable").forEach(function (tr) {
        tr.addEventListener("click", () => highlight([GP.json(tr, "range")], reportId, true));
      });
      const kbtn = d.querySelector(".show-kernel");
      if (kbtn) kbtn.addEventListener("click", async function () {
        const where = d.querySelector(".kernel-where");
        const url = document.getElementById("findings").getAttribute("data-kernel-url");
        try {
          const res = await GP.fetchJSON(url + "?" + new URLSearchParams({ name: d.getAttribute("data-ncu-kernel") }));
          if (!res.reports.length) { where.textContent = "this kernel is not in any nsys report of this run"; return; }
          const hit = res.reports[0];
          where.textContent = `${GP.fmtCount(hit.count)} launches, ${GP.fmtNs(hit.total_ns)} in all in the nsys report`;
          highlight(hit.first, hit.report_id, true);
        } catch (err) {
          where.textContent = "lookup failed: " + err.message;
        }
      });
    });
  }

  // Severity / rule / rank / phase filters over the rule rows and the findings inside them.
  function initFilters() {
    const form = document.getElementById("finding-filters");
    if (!form) return;
    const apply = function () {
      const want = Object.fromEntries(new FormData(form).entries());
      let shown = 0;
      document.querySelectorAll("#findings .rule-row").forEach(function (row) {
        let any = false;
        row.querySelectorAll("details.finding").forEach(function (f) {
          const ok = (!want.severity || f.dataset.severity === want.severity) &&
            (!want.rule || f.dataset.rule === want.rule) && (!want.rank || f.dataset.rank === want.rank) &&
            (!want.phase || f.dataset.phase === want.phase);
          f.hidden = !ok;
          if (ok) { any = true; shown++; }
        });
        row.hidden = !any;
      });
      document.getElementById("finding-count").textContent = `${GP.fmtCount(shown)} finding${shown === 1 ? "" : "s"} shown`;
    };
    form.addEventListener("change", apply);
    document.querySelectorAll("#impact-matrix a.filter-rule").forEach(function (a) {
      a.addEventListener("click", function (ev) {
        ev.preventDefault();
        form.elements.rule.value = a.getAttribute("data-rule");
        apply();
        form.scrollIntoView({ block: "start" });
      });
    });
    apply();
  }

  function cell(text, cls, sortKey) {
    const td = GP.el("td", { class: cls || null, "data-sort": sortKey === undefined ? null : String(sortKey) }, text);
    return td;
  }

  // A duration cell: raw ns kept for sorting and for GP.unifyUnits (one unit per column).
  function nsCell(v) {
    const td = cell(GP.fmtNs(v), "num", v ?? "");
    td.setAttribute("data-ns", v === null || v === undefined ? "" : String(v));
    return td;
  }

  async function loadTables() {
    const select = document.getElementById("tables-report");
    if (!select) return;
    const opt = select.options[select.selectedIndex];
    const ktab = document.getElementById("kernel-table").tBodies[0];
    const ntab = document.getElementById("nvtx-table").tBodies[0];
    ktab.textContent = "";
    ntab.textContent = "";
    try {
      const data = await GP.fetchJSON(opt.getAttribute("data-url"));
      const ncu = data.kernels.some((k) => k.category === "ncu");
      document.getElementById("kernel-last-col").textContent = ncu ? "est. speedup" : "streams";
      for (const k of data.kernels) {
        const tr = GP.el("tr");
        const name = cell(k.short || k.name, "name", k.name);
        name.setAttribute("title", k.name);      // the full demangled name on hover
        tr.append(name, cell(k.category || ""), cell(k.count, "num", k.count),
          nsCell(k.total_ns),
          cell(k.pct === null || k.pct === undefined ? "–" : GP.fmtPct(k.pct), "num", k.pct ?? ""),
          nsCell(k.mean_ns),
          nsCell(k.min_ns), nsCell(k.max_ns),
          ncu ? cell(k.speedup_pct === null || k.speedup_pct === undefined ? "–" : GP.fmtPct(k.speedup_pct), "num", k.speedup_pct ?? "")
            : cell(k.streams ?? "–", "num", k.streams ?? ""));
        ktab.appendChild(tr);
      }
      for (const n of data.nvtx) {
        const tr = GP.el("tr");
        tr.append(cell(n.text, "name"), cell(n.domain || ""), cell(n.count, "num", n.count),
          nsCell(n.total_ns), nsCell(n.mean_ns),
          nsCell(n.min_ns), nsCell(n.max_ns));
        ntab.appendChild(tr);
      }
      document.getElementById("kernel-count").textContent =
        `${GP.fmtCount(data.kernels.length)} kernel name${data.kernels.length === 1 ? "" : "s"}, most time first` +
        (data.kernels.length >= data.limit ? ` (only the ${GP.fmtCount(data.limit)} with the most time are listed)` : "");
      document.getElementById("nvtx-count").textContent = `${GP.fmtCount(data.nvtx.length)} range name${data.nvtx.length === 1 ? "" : "s"}`;
      GP.unifyUnits(document.getElementById("kernel-table"));
      GP.unifyUnits(document.getElementById("nvtx-table"));
      document.getElementById("kernel-table").setAttribute("data-loaded", "1");
    } catch (err) {
      ktab.appendChild(GP.el("tr")).appendChild(GP.el("td", { colspan: "8" }, "could not load: " + err.message));
    }
  }

  // Kernel x rank matrix: each cell shaded against the largest cell of its row.
  async function loadKernelMatrix() {
    const table = document.getElementById("kernel-rank-matrix");
    if (!table) return;
    try {
      const data = await GP.fetchJSON(table.getAttribute("data-url"));
      const head = table.tHead.appendChild(GP.el("tr"));
      head.appendChild(GP.el("th", null, "kernel"));
      for (const r of data.ranks) head.appendChild(GP.el("th", { class: "num" }, r));
      for (const k of data.kernels) {
        const tr = table.tBodies[0].appendChild(GP.el("tr"));
        tr.appendChild(GP.el("td", { class: "name", title: k.name }, k.short || k.name));
        const top = Math.max(...k.total_ns.map((v) => v || 0));
        k.total_ns.forEach(function (v) {
          const td = tr.appendChild(GP.el("td", { class: "num", "data-ns": v === null ? "" : String(v) }, GP.fmtNs(v)));
          if (v && top) td.style.background = `rgba(43, 108, 176, ${(0.06 + 0.5 * v / top).toFixed(2)})`;
        });
      }
      GP.unifyUnits(table);
      table.setAttribute("data-loaded", "1");
    } catch (err) {
      table.tBodies[0].appendChild(GP.el("tr")).appendChild(GP.el("td", null, "could not load: " + err.message));
    }
  }

  // While the run is still being ingested or analyzed, reload the page once its status changes.
  function watchStatus() {
    const badge = document.getElementById("run-status");
    const status = badge && badge.getAttribute("data-status");
    if (!badge || status === "ready" || status === "failed" || status === "deleted") return;
    setTimeout(async function () {
      try {
        const run = await GP.fetchJSON(badge.getAttribute("data-poll-url"));
        if (run.status !== status) { window.location.reload(); return; }
        // What is happening now, and for how long: reports ready so far, the analysis, time since the upload.
        const line = document.getElementById("run-progress");
        if (line) {
          const reports = run.reports || [];
          const ready = reports.filter((r) => r.status === "ready").length;
          const secs = (Date.now() - Date.parse(run.created_at)) / 1000;
          line.textContent = `${run.status}: ${GP.fmtCount(ready)} of ${GP.fmtCount(reports.length)} report${reports.length === 1 ? "" : "s"} ready` +
            (run.analysis_status ? `, analysis ${run.analysis_status}` : "") +
            (isFinite(secs) && secs >= 0 ? ` · ${GP.fmtNs(secs * 1e9)} since the upload` : "") +
            ". The page reloads when the run is ready.";
        }
      } catch (e) { /* transient: try again */ }
      watchStatus();
    }, 2000);
  }

  GP.onReady(function () {
    initFindings();
    watchStatus();
    initFilters();
    // Heat-map shading through the CSSOM (inline style attributes are blocked by our CSP).
    document.querySelectorAll("#impact-matrix td[data-heat], #network-matrix td[data-heat]").forEach(function (td) {
      const h = Number(td.getAttribute("data-heat"));
      // At most 56 % red under the page's dark text: 4.5:1 contrast or more on every cell.
      if (h > 0) td.style.background = `rgba(197, 48, 48, ${(0.06 + 0.5 * h).toFixed(2)})`;
    });
    const sel = document.getElementById("tables-report");
    if (sel) { sel.addEventListener("change", loadTables); loadTables(); }
    loadKernelMatrix();
  });
})();
