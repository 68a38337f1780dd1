// Upload page: several files as one run through XHR (for the progress bar), then live report status.
"use strict";

(function () {
  const GP = window.GP;
  const POLL_MS = 1000;
  let files = [];

  // Sizes in B/kB/MB/GB with three significant digits, like the server's fmt_bytes filter.
  const fmtBytes = GP.fmtBytes;

  function fmtSeconds(s) {
    if (!isFinite(s)) return "–";
    if (s < 60) return `${Math.max(1, Math.round(s))} s`;
    const m = Math.floor(s / 60);
    return m < 60 ? `${m} min ${Math.round(s - 60 * m)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  const UNKNOWN = "unknown type";
  function kindOf(name) {
    const n = name.toLowerCase().replace(/\.(gz|zst|zstd)$/, "");
    if (n.endsWith(".csv")) return "Nsight Compute CSV";
    if (n.endsWith(".sqlite")) return "Nsight Systems export";
    if (n.endsWith(".nsys-rep") || n.endsWith(".qdrep")) return "Nsight Systems report";
    if (n.endsWith(".ncu-rep")) return "Nsight Compute report";
    if (n.endsWith(".log") || n.endsWith(".txt")) return "NCCL log (checked on upload)";
    return UNKNOWN;
  }

  // Files the server would refuse, all named at once (the server stops at the first): empty ones and types
  // it does not read. Null when every file may go.
  function refusedFiles() {
    const empty = files.filter((f) => f.size === 0).map((f) => f.name);
    const unknown = files.filter((f) => f.size > 0 && kindOf(f.name) === UNKNOWN).map((f) => f.name);
    const parts = [];
    if (empty.length) parts.push(`EMPTY_FILE: ${empty.join(", ")} ${empty.length === 1 ? "is" : "are"} empty`);
    if (unknown.length) parts.push(`UNSUPPORTED_FILE: ${unknown.join(", ")} ${unknown.length === 1 ? "is not an export" : "are not exports"} ` +
      "(.sqlite, .nsys-rep, .qdrep, .csv or .ncu-rep, optionally .gz or .zst)");
    return parts.length ? parts.join("; ") + ". Nothing was sent: remove " +
      (empty.length + unknown.length === 1 ? "it" : "them") + " and upload again." : null;
  }

  let started = null;   // when the current upload began (performance.now()), for the elapsed time

  // The chosen files as a table (name, type, size, remove) with their total, so a wrong file is seen and
  // taken out before the upload starts.
  function listFiles() {
    const box = document.getElementById("file-list");
    box.textContent = "";
    document.getElementById("clear-files").hidden = !files.length;
    if (!files.length) return;
    const table = GP.el("table", { id: "chosen-files" });
    const body = GP.el("tbody");
    files.forEach(function (f, i) {
      const rm = GP.el("button", { type: "button", class: "secondary remove-file", "data-index": String(i),
        "aria-label": `remove ${f.name}` }, "remove");
      const td = GP.el("td");
      td.appendChild(rm);
      const tr = GP.el("tr");
      tr.append(GP.el("td", { class: "name", title: f.name }, f.name), GP.el("td", {}, kindOf(f.name)),
        GP.el("td", { class: "num" }, fmtBytes(f.size)), td);
      body.appendChild(tr);
    });
    const total = files.reduce((a, f) => a + f.size, 0);
    const foot = GP.el("tfoot");
    const tr = GP.el("tr");
    tr.append(GP.el("td", {}, `${files.length} file${files.length === 1 ? "" : "s"}`), GP.el("td"),
      GP.el("td", { class: "num", id: "files-total" }, fmtBytes(total)), GP.el("td"));
    foot.appendChild(tr);
    table.append(body, foot);
    box.appendChild(table);
  }

  function addFiles(list) {
    for (const f of list) if (!files.some((g) => g.name === f.name && g.size === f.size)) files.push(f);
    listFiles();
  }

  // Outside the status card, so it shows even before any upload started (Upload with no file chosen).
  function showError(message) {
    const e = document.getElementById("upload-error");
    e.textContent = message;
    e.hidden = false;
    e.focus();
  }

  function renderReports(run) {
    const body = document.getElementById("report-status").tBodies[0];
    body.textContent = "";
    for (const r of run.reports || []) {
      const tr = GP.el("tr", { "data-report-id": String(r.id), "data-status": r.status });
      // Progress only while the report is worked on: a ready report is done, whatever its last stage said.
      const p = r.progress || {};
      const working = r.status === "ingesting" || r.status === "analyzing";
      const prog = !working ? (r.status === "ready" ? "done" : "") :
        p.total ? `${p.stage || ""} ${GP.fmtShare((100 * (p.done || 0)) / p.total)}` : (p.stage || "");
      const badge = GP.el("span", { class: "badge " + r.status }, r.status);
      const st = GP.el("td");
      st.appendChild(badge);
      tr.append(GP.el("td", { class: "name" }, r.name), GP.el("td", {}, r.kind), st, GP.el("td", {}, prog),
        GP.el("td", { class: "error-message" }, r.error ? `${r.error.code}: ${r.error.message}` : ""));
      body.appendChild(tr);
    }
  }

  async function poll(form, runId) {
    const phase = document.getElementById("upload-phase");
    try {
      const run = await GP.fetchJSON(form.getAttribute("data-api") + "/" + runId);
      renderReports(run);
      const done = run.status === "ready" || run.status === "failed";
      const secs = started === null ? null : (performance.now() - started) / 1000;
      phase.textContent = `Run #${run.id}: ${run.status}` + (run.analysis_status && !done ? ` (analysis ${run.analysis_status})` : "") +
        (secs === null ? "" : done ? ` after ${fmtSeconds(secs)}` : ` · ${fmtSeconds(secs)} since the upload started`);
      document.getElementById("upload-status").setAttribute("data-run-status", run.status);
      if (run.error) showError(run.error);
      if (run.status === "ready" || run.status === "failed") return;
    } catch (err) {
      phase.textContent = "could not read the run's status: " + err.message;
    }
    setTimeout(() => poll(form, runId), POLL_MS);
  }

  function submit(form) {
    if (!files.length) { showError("Choose or drop at least one export file."); return; }
    const refused = refusedFiles();
    if (refused) { showError(refused); return; }
    const data = new FormData();
    data.append("job", document.getElementById("job").value.trim());
    for (const t of document.getElementById("tags").value.split(/\s+/)) if (t) data.append("tag", t);
    for (const t of document.getElementById("thresholds").value.split(/[\s,]+/)) if (t) data.append("threshold", t);
    for (const name of ["git_sha", "cluster", "window"]) {
      const v = document.getElementById(name).value.trim();
      if (v) data.append(name, v);
    }
    data.append("source", "web");
    files.forEach((f, i) => data.append("file" + i, f, f.name));
    const status = document.getElementById("upload-status");
    const bar = document.getElementById("upload-progress");
    const phase = document.getElementById("upload-phase");
    status.hidden = false;
    document.getElementById("upload-error").hidden = true;
    document.getElementById("upload-button").disabled = true;
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.getAttribute("data-api"));
    xhr.setRequestHeader("X-CSRF-Token", GP.csrf());
    xhr.setRequestHeader("Accept", "application/json");
    const cancel = document.getElementById("cancel-upload");
    started = performance.now();
    cancel.hidden = false;
    cancel.onclick = () => xhr.abort();
    // Bytes sent, speed and time left; the speed is the average since the start (steadier than per event).
    xhr.upload.addEventListener("progress", function (ev) {
      if (!ev.lengthComputable) return;
      bar.value = Math.round((100 * ev.loaded) / ev.total);
      const secs = (performance.now() - started) / 1000;
      const speed = secs > 0 ? ev.loaded / secs : 0;
      const eta = speed > 0 ? (ev.total - ev.loaded) / speed : Infinity;
      phase.textContent = `Uploading… ${fmtBytes(ev.loaded)} of ${fmtBytes(ev.total)}`;
      const rate = document.getElementById("upload-rate");
      rate.textContent = ev.loaded >= ev.total ? `${fmtBytes(speed)}/s · sent, waiting for the server`
        : `${fmtBytes(speed)}/s · about ${fmtSeconds(eta)} left`;
      rate.setAttribute("data-loaded", String(ev.loaded));
    });
    xhr.addEventListener("abort", function () {
      document.getElementById("upload-button").disabled = false;
      cancel.hidden = true;
      bar.value = 0;
      phase.textContent = "Upload cancelled; nothing was stored. The files are still chosen.";
      document.getElementById("upload-rate").textContent = "";
    });
    xhr.addEventListener("load", function () {
      document.getElementById("upload-button").disabled = false;
      cancel.hidden = true;
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      if (xhr.status >= 400 || !body) {
        const err = (body && body.error) || { code: "HTTP_" + xhr.status, message: xhr.statusText };
        phase.textContent = "Upload refused; nothing was stored.";
        // The field's own reason too ("window": "bad_window: …"), as text.
        const fields = (err.details && err.details.fields) || {};
        const why = Object.keys(fields).map((k) => `${k}: ${fields[k]}`).join("; ");
        showError(`${err.code}: ${err.message}` + (why ? ` ${why}` : ""));
        return;
      }
      bar.value = 100;
      // The server has the files: no more "waiting for the server", but how long the sending took.
      const sentIn = (performance.now() - started) / 1000;
      document.getElementById("upload-rate").textContent = `sent in ${fmtSeconds(sentIn)}`;
      files = [];
      listFiles();
      renderReports(body);
      const link = document.getElementById("run-link");
      link.textContent = "";
      const a = GP.el("a", { href: form.getAttribute("data-run-url").replace(/0$/, String(body.id)), id: "open-run" },
        `Open run #${body.id}`);
      link.appendChild(a);
      link.hidden = false;
      poll(form, body.id);
    });
    xhr.addEventListener("error", function () {
      document.getElementById("upload-button").disabled = false;
      cancel.hidden = true;
      showError("The upload failed: the server could not be reached.");
    });
    xhr.send(data);
  }

  GP.onReady(function () {
    const form = document.getElementById("upload-form");
    if (!form) return;
    const zone = document.getElementById("dropzone");
    const input = document.getElementById("files");
    input.addEventListener("change", () => { addFiles(input.files); input.value = ""; });
    ["dragenter", "dragover"].forEach((t) => zone.addEventListener(t, (ev) => { ev.preventDefault(); zone.classList.add("over"); }));
    ["dragleave", "drop"].forEach((t) => zone.addEventListener(t, (ev) => { ev.preventDefault(); zone.classList.remove("over"); }));
    zone.addEventListener("drop", (ev) => addFiles(ev.dataTransfer.files));
    document.getElementById("file-list").addEventListener("click", function (ev) {
      const b = ev.target.closest && ev.target.closest("button.remove-file");
      if (!b) return;
      files.splice(Number(b.getAttribute("data-index")), 1);
      listFiles();
    });
    document.getElementById("clear-files").addEventListener("click", () => { files = []; listFiles(); });
    form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(form); });
    // Completion of existing job names as one types (the datalist holds the most recent ones).
    const job = document.getElementById("job");
    let timer = null;
    job.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(async function () {
        try {
          const res = await GP.fetchJSON(form.getAttribute("data-jobs-url") + "?" + new URLSearchParams({ q: job.value }));
          const dl = document.getElementById("job-list");
          dl.textContent = "";
          for (const name of res.items) dl.appendChild(GP.el("option", { value: name }));
        } catch (e) { /* completion is a convenience; typing still works */ }
      }, 200);
    });
  });
})();
