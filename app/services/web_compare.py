"""The compare page's reading aids: KPI deltas (goodput in points), per-rank deltas, the default
baseline (the previous run of the same job) with its choices, and warnings when the runs are not alike."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Run
from app.services.run_query import live
from app.services.web_findings import report_label
from app.services.web_run import RunView, breakdown_of

BASELINE_CHOICES = 30

KPIS = (  # (key in RunView.totals, label, unit: "ns" durations | "pts" percentage points)
    ("span_ns", "GPU time (active span, all GPUs)", "ns"),
    ("goodput_pct", "goodput (compute share)", "pts"),
    ("comm_exposed_ns", "exposed communication", "ns"),
    ("idle_ns", "GPU idle", "ns"),
)


def _delta(base: Any, head: Any, unit: str) -> dict[str, Any]:
    delta = None if base is None or head is None else head - base
    pct = None if delta is None or unit == "pts" or not base else 100.0 * delta / base
    return {"base": base, "head": head, "delta": delta, "delta_pct": pct, "unit": unit}


def kpi_deltas(a: RunView, b: RunView) -> list[dict[str, Any]]:
    """Headline numbers of both runs and their difference (compared − baseline); goodput in points."""
    return [{"key": key, "label": label, **_delta(a.totals.get(key), b.totals.get(key), unit)}
            for key, label, unit in KPIS]


def _per_rank(view: RunView) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, report in enumerate(r for r in view.reports if r.kind == "nsys"):
        bd = breakdown_of(view.summaries.get(report.id))
        if bd is None:
            continue
        key = f"rank {report.rank}" if report.rank is not None else f"report {i + 1}"
        out[key] = {"label": report_label(report), "span_ns": bd.get("span_ns"),
                    "goodput_pct": bd.get("goodput_pct"), "comm_exposed_ns": bd.get("comm_exposed_ns"),
                    "idle_ns": bd.get("idle_ns")}
    return out


def rank_deltas(a: RunView, b: RunView) -> list[dict[str, Any]]:
    """Per rank (matched by rank number, else by report order), each KPI of both runs and the difference."""
    ra, rb = _per_rank(a), _per_rank(b)
    rows = []
    for key in sorted(set(ra) | set(rb), key=lambda k: (k.split()[0], int(k.split()[1]))):
        x, y = ra.get(key, {}), rb.get(key, {})
        rows.append({"rank": key, "label": y.get("label") or x.get("label") or key,
                     "kpis": [{"key": k, **_delta(x.get(k), y.get(k), unit)} for k, _l, unit in KPIS]})
    return rows


def warnings(a: RunView, b: RunView) -> list[str]:
    """Why the comparison may mislead: other job, other tools, other number of ranks."""
    out = []
    if a.job != b.job:
        out.append(f"The runs belong to different jobs ({a.job} and {b.job}).")
    ka, kb = sorted({r.kind for r in a.reports}), sorted({r.kind for r in b.reports})
    if ka != kb:
        out.append(f"The runs were profiled with different tools ({' + '.join(ka) or 'none'} and "
                   f"{' + '.join(kb) or 'none'}).")
    na, nb = sum(r.kind == "nsys" for r in a.reports), sum(r.kind == "nsys" for r in b.reports)
    if na != nb:
        out.append(f"The runs have different numbers of nsys reports ({na} and {nb}): totals add up different ranks.")
    return out


def previous_run(session: Session, run: Run) -> int | None:
    """The run of the same job created just before ``run`` (the default baseline)."""
    return session.scalar(
        sa.select(Run.id).where(Run.job_id == run.job_id, live(), Run.id != run.id,
                                sa.or_(Run.created_at < run.created_at,
                                       sa.and_(Run.created_at == run.created_at, Run.id < run.id)))
        .order_by(Run.created_at.desc(), Run.id.desc()).limit(1))


def baseline_choices(session: Session, run: Run) -> list[dict[str, Any]]:
    """Other runs of the same job, newest first, for the baseline drop-down."""
    rows = session.execute(
        sa.select(Run.id, Run.created_at, Run.git_sha).where(Run.job_id == run.job_id, live(),
                                                             Run.id != run.id)
        .order_by(Run.created_at.desc(), Run.id.desc()).limit(BASELINE_CHOICES)).all()
    return [{"id": r.id, "label": f"#{r.id} · {r.created_at:%Y-%m-%d %H:%M}" + (f" · {r.git_sha[:10]}" if r.git_sha else "")}
            for r in rows]
