"""The read store of analysis results: a run's stored summary rows (``RunSummary``) become typed entities here and
nowhere else (MLflow's ``to_mlflow_entity``: rows become entities in one place), so the pages and the API read
``analysis.api`` types (``ReportSummary``, ``Verdict`` ...) rather than JSON keys."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from analysis.api import FindingResult, NcuKernel, ReportSummary, RunNetworkPath, ToolKind, Verdict
from app.models import RunSummary

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Headline:
    """A run's (or a report's) headline numbers from its summary row; every field None before an analysis."""

    span_ns: int | None = None
    compute_ns: int | None = None
    comm_exposed_ns: int | None = None
    memory_only_ns: int | None = None
    idle_ns: int | None = None
    goodput_pct: float | None = None
    finding_count: int | None = None
    top_impact_ns: int | None = None

    @classmethod
    def of(cls, row: RunSummary | None) -> Headline:
        if row is None:
            return cls()
        return cls(row.span_ns, row.compute_ns, row.comm_exposed_ns, row.memory_only_ns, row.idle_ns,
                   row.goodput_pct, row.finding_count, row.top_impact_ns)

    def to_api(self) -> dict[str, Any]:
        """The API's headline fields (``HEADLINE`` in app/api/schemas.py), in its order."""
        return dataclasses.asdict(self)


def report_summary(data: Any) -> ReportSummary | None:
    """One report's stored summary as its typed form; None when the row holds none (no analysis yet, or the
    run-level row). A part stored by an older version that no longer reads as its type stays JSON in
    ``details`` (its attribute is None): the page then leaves that part out, as it would a missing key."""
    if not isinstance(data, dict) or not isinstance(data.get("file"), str) or not isinstance(data.get("tool"), str):
        return None
    return ReportSummary.from_json(data, lenient=True)


@dataclass(frozen=True)
class StoredKernel:
    """One kernel configuration of an ncu report as the metadata DB keeps it (``app.services.jobs.ncu_summary``):
    its longest launch, typed, with the configuration's profiled launches and their summed time (None: the
    summary was stored before these were kept; then the launch counts once and its own duration is the time)."""

    kernel: NcuKernel
    launches: int | None = None
    profiled_ns: float | None = None


@dataclass(frozen=True)
class NcuHeadline:
    """What an ncu report's stored summary says of the whole report: its profiled kernel time (None: no launch's
    duration is known) and what its findings could save, bounded per kernel (None: not stored)."""

    gpu_time_ns: int | None = None
    estimated_saving_ns: int | None = None


@dataclass(frozen=True)
class StoredReport:
    """One report's summary row: its headline columns, its summary typed, and the JSON as stored (what the API
    serves: an ncu report's ``kernels`` carry the launch count and profiled time ``ncu_summary`` adds).

    ``findings``: a multi-rank run's report keeps its own findings in its summary (the run's findings are one per
    rule and scope across the ranks); ``kernels`` and ``ncu``: an ncu report's stored kernels and headline."""

    report_id: int
    headline: Headline
    summary: ReportSummary | None
    data: Mapping[str, Any]
    findings: tuple[FindingResult, ...] = ()
    kernels: tuple[StoredKernel, ...] = ()
    ncu: NcuHeadline | None = None

    def to_api(self) -> dict[str, Any]:
        """One item of the API's ``Summary.reports``."""
        return {"report_id": self.report_id, **self.headline.to_api(), "data": dict(self.data)}


@dataclass(frozen=True)
class StoredRun:
    """The run-level summary row: the sums over the reports, and what the analysis says of the run as a whole
    (``analysis.api.AnalysisResult``'s run-wide fields, as ``app.services.jobs.results`` stored them)."""

    headline: Headline
    verdict: Verdict | None = None
    missing: tuple[Mapping[str, Any], ...] = ()
    missing_ranks: tuple[int, ...] = ()
    run_warnings: tuple[Mapping[str, Any], ...] = ()
    network: Mapping[str, Any] | None = None
    collectives: Mapping[str, Any] | None = None
    network_path: RunNetworkPath | None = None


def _verdict(value: Any) -> Verdict | None:
    if not isinstance(value, dict):
        return None
    try:
        return Verdict.from_json(value)
    except (TypeError, KeyError):  # stored by a version whose verdict had other keys: none to show
        logger.warning("stored verdict does not read as a Verdict: %s", sorted(value))
        return None


def _network_path(value: Any) -> RunNetworkPath | None:
    if not isinstance(value, dict):
        return None
    try:
        return RunNetworkPath.from_json(value)
    except (TypeError, KeyError, ValueError, AttributeError):  # stored by a version whose path had other keys
        logger.warning("stored network path does not read as a RunNetworkPath: %s", sorted(value))
        return None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


def _findings(value: Any) -> tuple[FindingResult, ...]:
    out = []
    for f in value if isinstance(value, list) else ():
        try:
            out.append(FindingResult.from_json(f))
        except (TypeError, KeyError):  # stored by a version whose findings had other keys: left out
            logger.warning("stored finding does not read as a FindingResult: %s", sorted(f) if isinstance(f, dict) else f)
    return tuple(out)


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _kernels(summary: ReportSummary | None, data: Mapping[str, Any]) -> tuple[StoredKernel, ...]:
    """The stored kernels typed (``summary.kernels``) beside the launch counts and times the metadata DB adds to
    each; none when they do not read as ``NcuKernel`` (the summary keeps them in ``details``)."""
    typed = () if summary is None else summary.kernels or ()
    stored = data.get("kernels")
    out = []
    for kernel, raw in zip(typed, stored if isinstance(stored, list) else [], strict=False):
        launches = _number(raw.get("launches"))
        out.append(StoredKernel(kernel, None if launches is None else int(launches), _number(raw.get("profiled_ns"))))
    return tuple(out)


def _ncu(data: Mapping[str, Any]) -> NcuHeadline | None:
    if data.get("tool") != ToolKind.NCU:
        return None
    saving = data.get("estimated_saving")
    ns = _number(saving.get("ns")) if isinstance(saving, dict) else None
    time_ns = _number(data.get("gpu_time_ns"))
    return NcuHeadline(None if time_ns is None else int(time_ns), None if ns is None else int(ns))


def to_report_entity(row: RunSummary) -> StoredReport:
    """A report's summary row as its entity."""
    data = row.data if isinstance(row.data, dict) else {}
    summary = report_summary(data)
    return StoredReport(int(row.report_id or 0), Headline.of(row), summary, data, _findings(data.get("findings")),
                        _kernels(summary, data), _ncu(data))


def to_run_entity(row: RunSummary | None) -> StoredRun:
    """The run-level summary row as its entity (all empty before the first analysis)."""
    data = (row.data if row is not None and isinstance(row.data, dict) else None) or {}
    return StoredRun(
        headline=Headline.of(row), verdict=_verdict(data.get("verdict")),
        missing=tuple(m for m in data.get("missing") or [] if isinstance(m, dict)),
        missing_ranks=tuple(int(r) for r in data.get("missing_ranks") or []),
        run_warnings=tuple(w for w in data.get("run_warnings") or [] if isinstance(w, dict)),
        network=_mapping(data.get("network")), collectives=_mapping(data.get("collectives")),
        network_path=_network_path(data.get("network_path")))


@dataclass(frozen=True)
class RunResults:
    """A run's stored analysis as entities: each report's summary (by report id, in id order) and the run's.
    ``analyzed``: whether the run has a run-level row (an analysis finished at least once)."""

    reports: dict[int, StoredReport] = field(default_factory=dict)
    run: StoredRun = field(default_factory=lambda: StoredRun(Headline()))
    analyzed: bool = False

    def summary(self, report_id: int | None) -> ReportSummary | None:
        """The typed summary of one report (None: not analyzed, or not a report summary)."""
        stored = self.reports.get(report_id) if report_id is not None else None
        return None if stored is None else stored.summary


def results_of(rows: list[RunSummary]) -> RunResults:
    """The entities of a run's summary rows (all of them, in any order)."""
    total = next((r for r in rows if r.report_id is None), None)
    reports = {e.report_id: e for e in sorted((to_report_entity(r) for r in rows if r.report_id is not None),
                                              key=lambda e: e.report_id)}
    return RunResults(reports, to_run_entity(total), total is not None)


def run_results(session: Session, run_id: int) -> RunResults:
    """The run's stored analysis as entities (the caller checked the run exists)."""
    return results_of(list(session.scalars(sa.select(RunSummary).where(RunSummary.run_id == run_id))))
