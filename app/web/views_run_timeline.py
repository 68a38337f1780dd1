"""JSON and file routes of the run-wide timeline: all ranks' windows, a click's selection, merged trace."""

from __future__ import annotations

from flask import jsonify

from analysis import api
from app.db import get_session
from app.errors import ApiError
from app.services.pages import web_timeline
from app.settings import current_settings
from app.web import bp
from app.web.security import login_required
from app.web.views_data import _int_arg, _trace_download


@bp.route("/runs/<id:run_id>/timeline.json")
@login_required
def run_timeline_json(run_id: int):
    session = get_session()
    with web_timeline.run_parts(session, current_settings(), run_id) as (parts, cats, exts):
        body = api.run_timeline_window(parts, _int_arg("start_ns"), _int_arg("end_ns"),
                                       _int_arg("buckets", 1000) or 1000, catalogues=cats, extents=exts)
    return jsonify({**body, "phases": web_timeline.run_phases(session, run_id, body["groups"])})


@bp.route("/runs/<id:run_id>/timeline/select.json")
@login_required
def run_timeline_select(run_id: int):
    report_id, t = _int_arg("report_id"), _int_arg("t_ns")
    if report_id is None or t is None:
        raise ApiError("VALIDATION_ERROR", "report_id and t_ns are required")
    with web_timeline.run_parts(get_session(), current_settings(), run_id) as (parts, _cats, _exts):
        body = api.run_timeline_select(parts, report_id, _int_arg("pid"), _int_arg("device"), _int_arg("stream"), t,
                                       _int_arg("tol_ns", 0) or 0)
    return jsonify(body)


@bp.route("/runs/<id:run_id>/trace.json")
@login_required
def run_chrome_trace(run_id: int):
    start, end = _int_arg("start_ns"), _int_arg("end_ns")
    ctx = web_timeline.run_parts(get_session(), current_settings(), run_id)
    parts, _cats, _exts = ctx.__enter__()  # closed when the streamed response ends

    def generate():
        try:
            yield from api.run_chrome_trace_json(parts, start, end)
        finally:
            ctx.__exit__(None, None, None)

    return _trace_download(f"run{run_id}-all-ranks", start, end, generate())


@bp.route("/runs/<id:run_id>/kernels.json")
@login_required
def run_kernel_matrix(run_id: int):
    """Kernel x rank total time over the run's nsys reports (a straggler kernel is one rank's outlying cell)."""
    with web_timeline.run_parts(get_session(), current_settings(), run_id) as (parts, _cats, _exts):
        labels = [api.group_label(p.rank, p.host) for p in parts]
        labels = [lab if lab != "report" else f"report {p.report_id}" for lab, p in zip(labels, parts, strict=True)]
        body = api.kernel_rank_matrix([(lab, p.trace) for lab, p in zip(labels, parts, strict=True)])
    return jsonify(body)
