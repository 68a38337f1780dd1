"""The UI's pages: runs list, run page, compare, job trends, upload and the rules catalogue."""

from __future__ import annotations

from typing import Any

from flask import abort, flash, redirect, render_template, request, url_for

from analysis.api import ToolKind, describe_rule, fmt, rule_catalogue
from app.auth import current_principal
from app.db import get_session
from app.errors import ApiError
from app.ids import ascii_int
from app.models import RUN_STATUSES, AnalysisStatus, ReportStatus, RunStatus
from app.services.jobs import operations
from app.services.jobs import runs as runs_service
from app.services.jobs.runs import may_delete
from app.services.pages import compare as compare_service
from app.services.pages import web_findings, web_jobs, web_run, web_runs, web_trends
from app.services.pages.web_nccl import nccl_path_section
from app.services.pages.web_network import collectives_section, mpi_section, network_section
from app.services.reads import rules as rules_service
from app.services.runs.run_access import require_change
from app.services.runs.window_fit import check_window_fits
from app.settings import current_settings
from app.web import bp
from app.web.palette import IDLE_PALETTE
from app.web.security import login_required


def _page_or_404(fn, *args):
    try:
        return fn(*args)
    except ApiError as exc:
        if exc.status == 404:
            abort(404, description=exc.message)
        raise


@bp.route("/")
@login_required
def runs():
    filters = web_runs.RunFilters.parse(request.args)
    db = get_session()
    page = web_runs.list_runs(db, filters)
    args = {k: v for k, v in request.args.items() if k != "page"}
    return render_template(
        # deleted runs are never listed: no status option that can only find nothing
        "runs.html", page=page, filters=filters, args=args, statuses=[s for s in RUN_STATUSES if s != RunStatus.DELETED],
        jobs=web_runs.job_names(db, limit=200), submitters=web_runs.submitters(db),
    )


@bp.route("/runs/<id:run_id>")
@login_required
def run(run_id: int):
    view = _page_or_404(web_run.run_view, get_session(), run_id)
    nsys = [r for r in view.reports if r.kind == ToolKind.NSYS and r.trace_path]
    findings = web_run.timeline_hints(web_run.on_run_clock(web_run.rank_findings(view), view.reports), view.reports)
    rule_docs = {}
    for f in findings:
        if f["rule_id"] not in rule_docs:
            rule_docs[f["rule_id"]] = describe_rule(f["rule_id"])
    top = max((int(f["impact_ns"] or 0) for f in findings), default=0)
    rows = web_findings.rule_rows(findings, view.reports)
    return render_template("run.html", view=view, findings=findings, rule_docs=rule_docs, nsys_reports=nsys,
                           top_impact=top, report_kinds={r.id: r.kind for r in view.reports},
                           rule_rows=rows, matrix=web_findings.impact_matrix(rows, view.reports),
                           minor_ns=web_findings.MINOR_NS, ncu_kpis=web_run.ncu_kpis(view),
                           retryable=_retryable(view),
                           iterations=web_run.iteration_sections(view.reports, view.results),
                           system=web_run.system_sections(view.reports, view.results),
                           idle=web_run.idle_sections(view.reports, view.results), idle_palette=IDLE_PALETTE,
                           network=network_section(view.results.run), collectives=collectives_section(view.results.run),
                           mpi=mpi_section(view.results.run),
                           refused_window=request.args.get("window", "")[:200] or None,
                           nccl=nccl_path_section(view.results.run))


def _retryable(view) -> bool:
    p = current_principal()
    if p is None or not may_delete(view.run, user_id=p.user_id, token_id=p.token_id,
                                    is_admin=p.is_admin):
        return False  # changing a run is for its submitter and admins
    return any(r.status == ReportStatus.FAILED and r.error_code in operations.TRANSIENT for r in view.reports) or (
        view.run.analysis_status == AnalysisStatus.FAILED and any(r.status == ReportStatus.READY for r in view.reports))


@bp.route("/runs/<id:run_id>/retry", methods=["POST"])
@login_required
def retry_run(run_id: int):
    """The run page's Retry button: the same service as POST /api/v1/runs/<id>/retry."""
    try:
        require_change(get_session(), run_id, current_principal(), "retry")
        out = operations.retry_run(get_session(), current_settings(), run_id)
    except ApiError as exc:
        if exc.status == 404:
            abort(404, description=exc.message)
        flash(exc.message, "error")
    else:
        flash(f"Retrying {fmt.count(len(out.reports))} report(s)" + (" and the analysis." if out.analyze_run else "."))
    return redirect(url_for("web.run", run_id=run_id))


@bp.route("/runs/<id:run_id>/analysis", methods=["POST"])
@login_required
def reanalyze(run_id: int):
    """The run page's window form: analyze the run again with the window asked for."""
    try:
        require_change(get_session(), run_id, current_principal(), "re-analyse")
        check_window_fits(get_session(), current_settings(), run_id, request.form.get("window"))
        runs_service.reanalyze(get_session(), current_settings(), run_id, request.form.get("window"))
        flash(f"Analysis queued with window {request.form.get('window') or 'steady'}.")
    except ApiError as exc:
        if exc.status == 404:
            abort(404, description=exc.message)
        fields = (exc.details or {}).get("fields") or {}
        flash(fields.get("window") or exc.message, "error")
        # The refused spec goes back into the field, to be corrected rather than typed again.
        return redirect(url_for("web.run", run_id=run_id, window=(request.form.get("window") or "")[:200]))
    return redirect(url_for("web.run", run_id=run_id))


@bp.route("/compare")
@login_required
def compare():
    db = get_session()
    # ``a``/``b`` (the page's form) or ``base``/``head`` (the API's names for the same runs).
    a_text = request.args.get("a") or request.args.get("base", "")
    b_text = request.args.get("b") or request.args.get("head", "")
    try:
        b = ascii_int(b_text)
    except ValueError:
        return render_template("compare_pick.html", a=a_text, b=b_text)
    head = _page_or_404(runs_service.get_run, db, b)
    try:
        a = ascii_int(a_text)
    except ValueError:
        # No baseline chosen: the previous run of the same job.
        previous = compare_service.previous_run(db, head)
        if previous is None:
            return render_template("compare_pick.html", a="", b=b,
                                   note="This is the first run of its job: choose a baseline run.")
        a = previous
    c = _page_or_404(compare_service.compare_runs, db, current_settings(), a, b)
    return render_template("compare.html", c=c.diff, a=c.base, b=c.head, kpis=c.kpis, ranks=c.ranks,
                           warnings=c.warnings, choices=compare_service.baseline_choices(db, head))


@bp.route("/jobs/<path:name>")
@login_required
def job(name: str):
    tag = request.args.get("tag", "").strip() or None
    trends = _page_or_404(web_jobs.job_trends, get_session(), name, tag)
    href = lambda run_id: url_for("web.run", run_id=run_id)  # noqa: E731
    return render_template("job.html", t=trends, median_window=web_jobs.MEDIAN_WINDOW, href=href, tag=tag,
                           metrics=web_trends.metrics(get_session(), trends, href),
                           ncu=web_trends.ncu_trends(get_session(), current_settings(), trends, href))


@bp.route("/upload")
@login_required
def upload():
    thresholds = [(f"{r['id']}.{name}", t) for r in rules_service.catalogue() for name, t in r["thresholds"].items()]
    return render_template("upload.html", jobs=web_runs.job_names(get_session(), limit=200), thresholds=thresholds,
                           windows=("steady", "all", "startup"))


@bp.route("/rules")
@login_required
def rules():
    described = rule_catalogue()
    return render_template("rules.html", rules=described)


@bp.route("/runs")
def runs_alias():
    args: dict[str, Any] = request.args.to_dict()
    return redirect(url_for("web.runs", **args))
