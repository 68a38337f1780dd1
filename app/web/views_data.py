"""JSON and file routes the pages fetch: timeline windows, kernel/NVTX tables, downloads, job completion."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from flask import Response, jsonify, request, stream_with_context

from analysis import api
from app import finite_json
from app.db import get_session
from app.errors import ApiError
from app.ids import ascii_float, ascii_int
from app.models import Report
from app.services.pages import web_export, web_run, web_runs
from app.settings import current_settings
from app.web import bp
from app.web.security import login_required

# Bounds of the integer query parameters of the timeline and trace routes: times are int64 ns; a window is
# drawn in at most this many buckets.
INT64 = (-(2**63), 2**63 - 1)
ARG_BOUNDS = {"buckets": (1, 20_000), "tol_ns": (0, INT64[1])}


def _int_arg(name: str, default: int | None = None) -> int | None:
    """An integer query parameter (integral decimal or float text, as the page's script sends times), within
    its bounds (``ARG_BOUNDS``, else int64); ApiError VALIDATION_ERROR (400) naming it otherwise."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    lo, hi = ARG_BOUNDS.get(name, INT64)
    try:
        if len(raw) > 32:
            raise ValueError(raw)
        number = ascii_float(raw)
        if not lo <= number <= hi:  # infinities and 1e308 too
            raise ValueError(raw)
        value = ascii_int(raw) if raw.lstrip("+-").isdigit() else int(number)
        if not lo <= value <= hi:
            raise ValueError(raw)
        return value
    except ValueError:
        raise ApiError("VALIDATION_ERROR", f"{name} must be an integer from {lo} to {hi}",
                       {"parameter": name, "fields": {name: f"an integer from {lo} to {hi}"}}) from None


def _open(run_id: int, report_id: int) -> tuple[Report, api.Trace]:
    report, path = web_run.ready_report(get_session(), current_settings(), run_id, report_id)
    return report, api.open_report(path, report.name)


def _download_name(stem: str, ext: str) -> str:
    # Only server-made characters in the header; the client file name never reaches it unfiltered.
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:80] + "." + ext


def _trace_download(stem: str, start: int | None, end: int | None, chunks: Iterator[str]) -> Response:
    """A Chrome trace streamed as a JSON attachment, its file name from ``stem`` and the window asked for."""
    suffix = "" if start is None and end is None else f"-{start or 0}-{end or 'end'}"
    name = _download_name(f"{stem}{suffix}", "json")
    return Response(stream_with_context(chunks), mimetype="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@bp.route("/runs/<id:run_id>/reports/<id:report_id>/timeline.json")
@login_required
def timeline_json(run_id: int, report_id: int):
    _, trace = _open(run_id, report_id)
    try:
        body = api.timeline_window(trace, _int_arg("start_ns"), _int_arg("end_ns"), _int_arg("buckets", 1000) or 1000)
    finally:
        trace.close()
    return jsonify(body)


@bp.route("/runs/<id:run_id>/reports/<id:report_id>/tables.json")
@login_required
def tables_json(run_id: int, report_id: int):
    report, trace = _open(run_id, report_id)
    try:
        body: dict[str, Any] = dict(api.report_tables(trace, report.kind))
    finally:
        trace.close()
    body["limit"] = api.table_limit()
    return jsonify(body)


@bp.route("/runs/<id:run_id>/kernel.json")
@login_required
def kernel_json(run_id: int):
    """Where a kernel named by an ncu finding ran in the run's nsys reports (first instances)."""
    name = request.args.get("name", "")
    view = web_run.run_view(get_session(), run_id)
    out = []
    for report in view.reports:
        if report.kind != api.ToolKind.NSYS or not report.trace_path:
            continue
        _, trace = _open(run_id, report.id)
        try:
            found = api.kernel_instances(trace, name)
        finally:
            trace.close()
        if found["count"]:
            out.append({"report_id": report.id, **found})
    return jsonify({"name": name, "reports": out})


@bp.route("/runs/<id:run_id>/reports/<id:report_id>/calls.json")
@login_required
def calls_json(run_id: int, report_id: int):
    """Where the calls a finding names (``name``, repeated) held the GPU idle in the report's analysis window:
    the time ranges of a finding whose evidence is totals per name (MEM006, HOST001 ...)."""
    names = [n for n in request.args.getlist("name") if n][:50]
    window = web_run.report_window(get_session(), run_id, report_id)
    report, trace = _open(run_id, report_id)
    try:
        found = api.named_calls(trace, names, window) if report.kind == api.ToolKind.NSYS else {"count": 0, "longest": []}
    finally:
        trace.close()
    return jsonify({"report_id": report_id, "names": names, **found})


@bp.route("/runs/<id:run_id>/reports/<id:report_id>/trace.json")
@login_required
def chrome_trace_download(run_id: int, report_id: int):
    report, trace = _open(run_id, report_id)
    start, end = _int_arg("start_ns"), _int_arg("end_ns")

    def generate():
        try:
            yield from api.chrome_trace_json(trace, start, end)
        finally:
            trace.close()

    return _trace_download(f"run{run_id}-report{report_id}", start, end, generate())


@bp.route("/runs/<id:run_id>/findings.<fmt>")
@login_required
def findings_download(run_id: int, fmt: str):
    view = web_run.run_view(get_session(), run_id)
    findings = [web_run.finding_dict(f) for f in view.findings]
    if fmt == "json":
        body = finite_json.dumps({"run_id": run_id, "findings": findings, "rules": [r.to_json() for r in view.run.rules]},
                                 indent=1)
        mimetype = "application/json"
    elif fmt == "csv":
        body = web_export.findings_csv(findings)
        mimetype = "text/csv"  # Werkzeug adds "; charset=utf-8" to text types (once)
    else:
        raise ApiError("NOT_FOUND", "Findings are available as .csv or .json.")
    name = _download_name(f"run{run_id}-findings", fmt)
    return Response(body, mimetype=mimetype, headers={"Content-Disposition": f'attachment; filename="{name}"'})


@bp.route("/jobs.json")
@login_required
def jobs_json():
    return jsonify({"items": web_runs.job_names(get_session(), request.args.get("q", "").strip(), limit=20)})
