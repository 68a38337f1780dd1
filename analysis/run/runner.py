"""Analyze a run in two steps, shared by the offline CLI and the service's workers .

1. ``analyze_report``: one report on its own. Its phases and analysis window (the report's own: a
   rank's steady window is its own steady phase), its summaries, every per-report rule, and the
   compact facts the cross-rank step needs (``analysis.run.facts``: every NCCL kernel instance and
   the loop's iterations), written to a folder beside the report. One worker, one report's memory.
2. ``analyze_run_facts``: the run. Only the cross-rank rules (COMM002 stragglers, the per-step
   slowest rank) over the reports' facts, the merge of every rule's status, and the ranking of all
   findings. Its memory grows with the collectives and iterations of the run, not with the size of its
   traces, except where it opens them: ncu reports (see below), and, in runs of several nsys reports with
   NCCL message sizes, every nsys report's NCCL tables for the rules of scope ``cross_report``.

``analyze_run`` is the two steps in one process (``goodput analyze``); the service runs step 1 in one
Celery task per report right after its ingest and step 2 once when the run's last report is done, so
the two paths give the same results by construction.

ncu reports link their kernels to the run's nsys kernel time : their step 1 takes the nsys
reports' kernel groups (``ReportResult.facts['nsys_kernels']``), so they are analyzed after the run's
nsys reports (in the service: inside the run-level step; ncu reports are small).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from analysis.diagnosis import breakdown as bd
from analysis.diagnosis import ncu_verdict
from analysis.diagnosis.findings import Finding, rank_findings
from analysis.diagnosis.idle_anatomy import idle_anatomy
from analysis.diagnosis.launches import launch_summary
from analysis.diagnosis.ncu.impact import NsysKernelsJson, kernels_from_json, kernels_to_json, nsys_kernels
from analysis.diagnosis.ncu.kernels import report_kernels
from analysis.diagnosis.ncu_gains import annotate_kernels, report_saving, share_gains
from analysis.diagnosis.rules.base import Registry, Rule, RuleContext, RunFacts, Skip, evaluate
from analysis.diagnosis.rules.nsys.run_nodes import collective_split, instances, steps_by_host
from analysis.diagnosis.rules.registry import default_registry
from analysis.diagnosis.step_anatomy import anatomy
from analysis.diagnosis.summary import report_info
from analysis.diagnosis.verdict import VerdictFacts, report_verdict, run_verdict, verdict_facts
from analysis.duck import connect, cursor
from analysis.input_kinds import step_of
from analysis.loops import iterations as it
from analysis.loops import steps as records_of
from analysis.loops import window as win
from analysis.loops.loop_report import loop_list, loops_holding, program_shape, run_phase
from analysis.loops.phases import Loop, PhaseInfo, phase_info
from analysis.model.activity import unit_ops
from analysis.model.network import report_network, run_matrix
from analysis.model.nvtx_projection import nvtx_projection
from analysis.model.trace import DUCKDB_MEMORY_BYTES, Run, Trace
from analysis.readers import AnalysisStep, ToolKind
from analysis.report_types import (
    CollectiveSplit,
    MpiSplit,
    NvtxIterations,
    ReportInfo,
    RuleOutcome,
)
from analysis.result_parts import (
    JSON,
    IterationItem,
    Iterations,
    IterationTime,
    NcuKernel,
    PhaseSpan,
    StepAnatomy,
    StepRecord,
)
from analysis.results import AnalysisResult, FindingResult, ReportSummary, ReportWindow, RuleStatus, Verdict
from analysis.run import facts as run_facts
from analysis.run.cpus import cpu_time, shared_cpu_warnings
from analysis.run.facts import ReportFacts, ReportResult, finding_json
from analysis.run.mixed import run_warnings
from analysis.run.mpi import MPI_IDLE_FILE, read_mpi_idle, run_mpi, write_mpi
from analysis.run.nccl_step import (
    achieved_links,
    analyze_logs,
    check_net_overrides,
    log_warnings,
    run_network_path,
    split_overrides,
    with_network,
)
from analysis.run.nccl_step import rule_statuses as nccl_rule_statuses
from analysis.run.rollup import roll_up
from analysis.run.waiting import collective_waits, critical_verdict, mpi_apart, pairs_only, waiting_apart

logger = logging.getLogger(__name__)

ITEMS = 50  # per-iteration records in the JSON: the first ones (all of them feed the statistics)
# Windows that are a stretch of the loop: there a finding's cost per step is the natural unit.
LOOP_WINDOWS = ("steady", "iterations")


@dataclass
class AnalysisContext:
    """What every step of one analysis shares: the window, the selected rules and their thresholds."""

    spec: win.WindowSpec
    registry: Registry
    selected: list[type[Rule]]
    thresholds: Mapping[str, float] | None
    all_params: dict[str, dict[str, float]]
    memory_bytes: int = DUCKDB_MEMORY_BYTES


def make_context(*, rules: list[str] | None = None, thresholds: Mapping[str, float] | None = None,
                 window: str | None = None, memory_bytes: int = DUCKDB_MEMORY_BYTES) -> AnalysisContext:
    """Parse and check the options once (a bad window, rule or threshold raises here)."""
    spec = win.parse(window)
    registry = default_registry()
    core, net = split_overrides(thresholds)  # the NET rules' overrides go to the NCCL step, checked here
    registry.validate_overrides(core)
    check_net_overrides(net)
    selected = registry.select(rules)
    all_params = {r.id: registry.resolve_params(r, core) for r in registry}
    return AnalysisContext(spec, registry, selected, thresholds, all_params, memory_bytes)




def _judged_loop(spec: win.WindowSpec, info: PhaseInfo) -> tuple[Loop, int | None]:
    """The loop whose iterations the window holds, and its index in ``iterations.loops`` when the window
    is ``loop:N`` (None otherwise): loop N for ``loop:N``, the main loop for every other window (the
    steady window and ``iterations:A-B`` count the main loop's iterations)."""
    if spec.kind == "loop" and spec.a is not None and spec.a < len(info.loop.all):
        return info.loop.all[spec.a], spec.a
    return info.loop, None


def _time_stats(d: np.ndarray) -> IterationTime:
    """Iteration-time percentiles, extremes and mean of a loop's ``durations`` (non-empty)."""
    q = {f"p{p}": float(np.percentile(d, p)) for p in (10, 50, 90, 99)}
    return IterationTime(median_ns=q["p50"], p10_ns=q["p10"], p90_ns=q["p90"], p99_ns=q["p99"], min_ns=int(d.min()),
                         max_ns=int(d.max()), mean_ns=float(d.mean()))


def _anatomy(t: Trace, v: Trace, loop: Loop, all_params: Mapping[str, Mapping[str, float]],
             claimers: Sequence[type[Rule]]) -> StepAnatomy | None:
    """The window's step anatomy of ``loop`` (the one the window holds) from every iteration's exact record:
    those the ingest wrote into the file (the main loop's), else computed on the window's GPU operations, exact
    for the iterations that lie inside it, which are the only ones the anatomy uses."""
    if not len(loop) or not v.has_rows("kernels"):
        return None
    cols = records_of.stored(t, loop)
    unit: tuple[int | None, int | None] | None
    if cols is not None:
        pid, device = (None if int(c[0]) == -1 else int(c[0]) for c in (cols["pid"], cols["device"]))
        unit = (pid, device)
    else:
        unit = records_of.record_unit(t, loop)
        cols = records_of.compute(unit_ops(v), loop, unit)
    return anatomy(v, loop, all_params, claimers, cols, unit)


# The keys of a report's ``iterations`` that ``Iterations`` types; the NVTX step statistics, the loop's ``detail`` and
# the headline percentiles stay in its ``details``.
_ITERATIONS_TYPED = frozenset(f.name for f in dataclasses.fields(Iterations)) - {"details", "keys"}


def _loop_summary(trace: Trace, info: PhaseInfo, ana: StepAnatomy | None,
                  judged: tuple[Loop, int | None] | None = None) -> Iterations:
    """The report's ``iterations``: NVTX's step summary when the step is an NVTX range (its keys as before), plus
    the loop's source, counts, iteration-time percentiles and step anatomy, in the key order the JSON has always
    had (``keys``). ``judged``: the loop the window holds and its index under ``loop:N``; the anatomy is that
    loop's and says so (``anatomy.loop``: the index in ``loops``; ``anatomy.iteration_time``: its percentiles)."""
    loop = info.loop
    nv = loop.nvtx or (it.iterations(trace) if loop.source is None else NvtxIterations())
    head: Mapping[str, Any] = (it.compact(nv) if loop.source in ("nvtx", None) else
                               {"has_nvtx": trace.has_rows("nvtx"), "range": None, "domain": None})
    details = {k: v for k, v in head.items() if k not in _ITERATIONS_TYPED}
    keys = list(head)
    if loop.source == "nvtx":
        # NVTX steps keep their projected GPU time as the headline, as before; p99 of it beside.
        details["p99_ns"] = nv.get("p99_ns")
        keys.append("p99_ns")
    details["detail"] = loop.detail
    keys += ["source", "count", "signature", "detail", "reason"]
    d = loop.durations
    stats = _time_stats(d) if len(d) else None
    if stats is not None:
        keys.append("iteration_time")
        if loop.source != "nvtx":  # the loop's percentiles are the headline
            details.update(stats.to_json())
            keys += list(stats.to_json())
        keys.append("items")
    anatomy = None
    if ana is not None:
        loop_n = judged[1] if judged is not None else None
        anatomy = ana.for_report(ITEMS, loop_n, None if judged is None or loop_n is None
                                 else _time_stats(judged[0].durations))
    keys += ["loops", "program", *(["anatomy"] if anatomy is not None else [])]
    return Iterations(
        has_nvtx=head.get("has_nvtx", False), range=head.get("range"), domain=head.get("domain"), count=len(loop),
        source=loop.source, signature=tuple(loop.signature), reason=head.get("reason") if loop.source else loop.reason,
        loops=tuple(loop_list(loop)), program=program_shape(loop, info.phases), iteration_time=stats,
        items=None if stats is None else tuple(
            IterationItem(index=i, start_ns=int(loop.starts[i]), end_ns=int(loop.ends[i]), ns=int(d[i]))
            for i in range(min(len(d), ITEMS))),
        anatomy=anatomy, details=details, keys=tuple(dict.fromkeys(keys)))


def _report_rules(run: Run, ctx: AnalysisContext, only: tuple[str, ...] | None = None,
                  ) -> tuple[list[Finding], dict[str, RuleOutcome]]:
    """Every selected rule on a one-report run (rules of scope ``run`` only say whether they apply);
    ``only``: just these rule ids."""
    chosen = [r for r in ctx.selected if only is None or r.id in only]
    base = RuleContext(run, all_params=ctx.all_params, window=ctx.spec, claimers=ctx.registry.idle_claimers())
    findings, results = evaluate(run, chosen, base, ctx.all_params, defer_run_scope=True)
    return findings, {r.rule_id: {"status": r.status, "reason": r.reason, "findings": r.findings} for r in results}


def analyze_report(path: Path, label: str, ctx: AnalysisContext, facts_dir: Path | None = None, *,
                   nsys_links: Sequence[Mapping[str, Any]] | None = None) -> ReportResult:
    """Step 1 on one report. ``facts_dir``: where the facts table goes (None: no table is written, and
    the cross-rank rules will not see this report's collectives). ``nsys_links``: for an ncu report,
    the run's nsys reports' ``facts['nsys_kernels']`` (its kernels' nsys time comes from them)."""
    spec = ctx.spec
    linked = None if nsys_links is None else [kernels_from_json(k) for k in nsys_links]
    with Run.open([Path(path)], [label], ctx.memory_bytes) as run:
        t = run.traces[0]
        info_p = phase_info(t) if t.tool == ToolKind.NSYS else None
        phase, b, reason = win.resolve(spec, t, info_p) if info_p is not None else ("all", None, "not an nsys report")
        v = t.windowed(*b) if b is not None else t
        if info_p is not None:
            v.memo["phase_info"] = info_p
        wrun = Run([v], ctx.memory_bytes, nsys_kernels=linked)
        try:
            info = report_info(t)
            records: list[StepRecord] = []
            kernels: list[NcuKernel] = []
            if info_p is not None:
                info["breakdown"] = bd.breakdown(v).to_json()
                judged = _judged_loop(spec, info_p)
                ana = _anatomy(t, v, judged[0], ctx.all_params, ctx.registry.idle_claimers())
                records = list(ana.records) if ana is not None else []
                info["iterations"] = _loop_summary(t, info_p, ana, judged).to_json()
                info["nvtx"] = nvtx_projection(v, limit=10).to_json()
                info["launches"] = launch_summary(v).to_json()
                info["network"] = report_network(t, b)
                info["phases"] = [PhaseSpan(p.name, p.start_ns, p.end_ns, p.reason).to_json() for p in info_p.phases]
            elif t.tool == ToolKind.NCU:  # the per-kernel memory story, weighted by nsys time
                kernels = report_kernels(t, wrun)
                info["kernels"] = [k.to_json() for k in kernels]  # its place in the report; annotated below
            info["window"] = ReportWindow(spec=spec.text, phase=phase, reason=reason, start_ns=None if b is None else b[0],
                                          end_ns=None if b is None else b[1]).to_json()
            found, outcomes = _report_rules(wrun, ctx)
            if t.tool == ToolKind.NCU:  # one kernel's findings share its time; the report's sum is bounded
                found = share_gains(found)
                info["estimated_saving"] = report_saving(found, label)
                info["kernels"] = [k.to_json() for k in annotate_kernels(kernels, found, label)]
            if info_p is not None:  # after the rules: it reuses the gap rules' painting of the idle
                info["idle_anatomy"] = [a.to_json() for a in idle_anatomy(v, [(p.name, p.start_ns)
                                                                               for p in info_p.phases])]
            facts = _facts(t, v, None if info_p is None else _judged_loop(spec, info_p)[0], records, facts_dir)
        finally:
            if v is not t:
                v.close()
    paced = _host_paced(info)
    placed = [_with_loops(_per_step(_placed(f, {label: phase}, {label} if paced else set(), spec.text), [info]), info)
              for f in found]
    return ReportResult(label, t.tool, info, placed, outcomes, facts, facts_dir, spec.text)


def _with_loops(f: Finding, info: ReportInfo) -> Finding:
    """On a report with several loops, the finding with the loops its evidence lies in (``loops_holding``)."""
    spans = [(e.start_ns, e.end_ns) for e in f.evidence if e.start_ns is not None and e.end_ns is not None]
    loops = loops_holding(spans, info)
    return f if loops is None else dataclasses.replace(f, loops=loops)


def _anatomy_of(info: ReportInfo) -> JSON | None:
    """The report's step anatomy, if its loop has one."""
    return info["iterations"].get("anatomy") if "iterations" in info else None


def _phase_of(info: ReportInfo) -> str | None:
    """The phase the report's window is (None: no window)."""
    w = info.get("window")
    return w["phase"] if w else None


def _host_paced(info: ReportInfo) -> bool:
    """Whether the report's loop is host-paced (the GPU waits for the host by design: its idle is no defect)."""
    ana = _anatomy_of(info)
    return ana is not None and ana["kind"] == "host_paced"


def rerun_linked_rules(results: list[ReportResult], paths: list[Path], labels: list[str], ctx: AnalysisContext) -> None:
    """In a run with ncu reports: the rules that read ncu reports again on each nsys report (in its window), with
    the run's ncu reports attached, replacing those rules' step-1 findings and outcomes. Opens the nsys
    reports again, so only runs that have ncu reports pay for it (typically one or a few ranks)."""
    _cross_report(results, paths, ctx)
    ncu = [(Path(p), lab) for r, p, lab in zip(results, paths, labels, strict=True) if r.tool == ToolKind.NCU]
    only = tuple(r.id for r in ctx.selected if ToolKind.NCU in r.reads_tools)
    if not ncu or not only:
        return
    for r, p in zip(results, paths, strict=True):
        if r.tool != ToolKind.NSYS:
            continue
        with Run.open([Path(p), *(q for q, _ in ncu)], [r.label, *(lab for _, lab in ncu)], ctx.memory_bytes) as run:
            t = run.traces[0]
            b = run_facts.window_bounds(r)
            v = t.windowed(*b) if b is not None else t
            try:
                found, outcomes = _report_rules(Run([v, *run.traces[1:]], ctx.memory_bytes), ctx, only)
            finally:
                if v is not t:
                    v.close()
        phase = _phase_of(r.info)
        paced = _host_paced(r.info)
        placed = [_per_step(_placed(f, {r.label: phase or ctx.spec.text}, {r.label} if paced else set(),
                                    ctx.spec.text), [r.info]) for f in found]
        r.findings = [f for f in r.findings if f.rule_id not in only] + placed
        r.rules.update(outcomes)


def _cross_report(results: list[ReportResult], paths: list[Path], ctx: AnalysisContext) -> None:
    """The rules of scope ``cross_report`` over every nsys report of the run at once (each in its own window), when
    the run has several; their findings go back to the reports they name, their outcome to each."""
    only = tuple(r.id for r in ctx.selected if r.scope == "cross_report")
    nsys = [(r, Path(p)) for r, p in zip(results, paths, strict=True) if r.tool == ToolKind.NSYS]
    if len(nsys) < 2 or not only or not any(r.facts.get("nccl_sized") for r, _ in nsys):
        return  # without message sizes every report's step 1 already said what to collect
    with Run.open([p for _, p in nsys], [r.label for r, _ in nsys], ctx.memory_bytes) as run:
        views = []
        try:
            for (r, _), t in zip(nsys, run.traces, strict=True):
                b = run_facts.window_bounds(r)
                views.append(t.windowed(*b) if b is not None else t)
            found, outcomes = _report_rules(Run(views, ctx.memory_bytes), ctx, only)
        finally:
            for v, t in zip(views, run.traces, strict=False):
                if v is not t:
                    v.close()
    for r, _ in nsys:
        phase = _phase_of(r.info)
        own = [f for f in found if f.report == r.label]
        placed = [_per_step(_placed(f, {r.label: phase or ctx.spec.text}, set(), ctx.spec.text), [r.info])
                  for f in own]
        r.findings = [f for f in r.findings if f.rule_id not in only] + placed
        r.rules.update({rid: {"status": o["status"], "reason": o["reason"],
                              "findings": sum(1 for f in own if f.rule_id == rid) if o["status"] == "ok" else 0}
                        for rid, o in outcomes.items()})


def _facts(t: Trace, v: Trace, loop: Loop | None, records: list[StepRecord],
           facts_dir: Path | None) -> ReportFacts:
    """The report's compact facts (``analysis.run.facts``): JSON scalars and the iterations of ``loop`` (the
    one the window holds, whose records ``records`` are), and the collectives table written into ``facts_dir``."""
    facts: ReportFacts = {"rank": t.rank, "session_start_utc_ns": t.session_start_utc_ns}
    if t.tool != ToolKind.NSYS:
        return facts
    facts["verdict"] = verdict_facts(t)  # the whole report's extent, for the verdict once every rule ran
    facts["iterations"] = run_facts.iteration_facts(loop, records)
    kernels = nsys_kernels(v)
    facts["nsys_kernels"] = kernels_to_json(kernels) if kernels is not None else None
    # COMM002 takes part when the report's window has NCCL kernels; it reads all of them (as it always has).
    facts["nccl_in_window"] = v.has_rows("kernels") and v.scalar(
        "SELECT 1 FROM kernels WHERE category = 'nccl' LIMIT 1") is not None
    facts["span_ns"] = run_facts.span_ns(v) if facts["nccl_in_window"] else None
    # COMM003 compares ranks only where NCCL's payloads gave message sizes (``_cross_report``).
    facts["nccl_sized"] = t.has_rows("nccl_calls") and t.scalar(
        "SELECT 1 FROM nccl_calls WHERE bytes IS NOT NULL LIMIT 1") is not None
    # Read only where the window has NCCL kernels (``run_facts.comm_participants``, ``comm003_across``): elsewhere
    # not written (its launch join aggregates every CUDA API call: 13 ms of a small report's analysis).
    facts["collectives"] = (run_facts.write_collectives(t, facts_dir)
                            if facts_dir is not None and facts["nccl_in_window"] else None)
    facts["mpi"] = write_mpi(t, facts_dir, v) if facts_dir is not None else None
    facts["cpus"] = cpu_time(t, v.window if v is not t else None)  # ranks sharing a CPU (analysis.run.cpus)
    meta = t.meta
    facts["cpu_layout"] = {k: meta[k] for k in ("cpu_logical", "cpu_sockets") if k in meta}
    return facts


def _merge_outcomes(rule_cls: type[Rule], results: list[ReportResult]) -> tuple[str, str | None]:
    """One rule's status on the run from its outcome on each report (status, reason)."""
    outs = [(r, o) for r in results if (o := r.rules.get(rule_cls.id)) is not None]
    for status in ("error",):
        hit = next((o for _, o in outs if o["status"] == status), None)
        if hit is not None:
            return status, hit["reason"]
    if any(o["status"] == "ok" for _, o in outs):
        return "ok", None
    skipped = next((o for _, o in outs if o["status"] == "skipped"), None)
    if skipped is not None:
        return "skipped", skipped["reason"]
    # Missing on every report: the reason of a report of the rule's tool (one that says what it lacks).
    own = [o for r, o in outs if rule_cls.tool in ("any", r.tool)]
    chosen = (own or [o for _, o in outs])
    if chosen:
        return "skipped", chosen[0]["reason"]
    return "skipped", f"no {rule_cls.tool} report in this run"


def analyze_run_facts(results: list[ReportResult], ctx: AnalysisContext, *, top: int | None = None,
                      memory_bytes: int | None = None, by_rule: bool = True) -> AnalysisResult:
    """Step 2: the cross-rank rules over the reports' facts, every rule's status, all findings ranked.

    ``results`` in run order (the order of ``reports[]``). ``by_rule``: in a run of several nsys reports,
    ``findings`` holds one entry per rule and scope across the ranks (``analysis.run.rollup``) and each
    report's own findings are its ``reports[].findings``."""
    with InMemory(memory_bytes or ctx.memory_bytes) as mem:
        return _analyze_run_facts(results, ctx, mem, top=top, by_rule=by_rule)


class InMemory:
    """The run-level step's in-memory DuckDB database, created at its first use and closed with the step. Each user
    (the collective and MPI splits, COMM003's ranks, each rule of scope ``run``) reads on a connection of its own to
    it (``connect``): its temporary tables and settings its own, as with a database of its own. A database costs
    8-10 ms to create, a connection to it 0.2 ms: the two to four the step used to create were 20-40 ms of a small
    NCCL report's analysis."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self._db: Any = None

    def connect(self) -> Any:
        """A new connection to the database (DuckDB's limits of ``memory_bytes``, ``connect``'s settings); the
        caller closes it."""
        if self._db is None:
            self._db = connect(memory_bytes=self.memory_bytes)
        return cursor(self._db)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> InMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _analyze_run_facts(results: list[ReportResult], ctx: AnalysisContext, mem: InMemory, *, top: int | None,
                       by_rule: bool) -> AnalysisResult:
    spec = ctx.spec
    if any(r.run_split == "ranks" for r in ctx.selected):
        run_facts.comm003_across(results, mem.connect)
    split = _collective_split(results, mem)
    mpi, mpi_waiting = _mpi_split(results, mem)
    if mpi is not None:  # MPI calls across ranks, waiting for another rank apart from transfer
        split = CollectiveSplit() if split is None else split
        split["mpi"] = mpi
    waiting_apart([(r.label, r.facts.get("rank"), r.info.get("host"), r.findings) for r in results if r.tool == ToolKind.NSYS],
                  split)
    mpi_apart([(r.label, _name(r), r.findings, _mpi_idle(r)) for r in results if r.tool == ToolKind.NSYS], mpi,
              mpi_waiting)
    run_found: dict[str, list[Finding]] = {}
    run_status: dict[str, tuple[str, str | None]] = {}
    for rule_cls in ctx.selected:
        if rule_cls.scope != "run":
            continue
        status, reason = _merge_outcomes(rule_cls, results)
        if not any((o := r.rules.get(rule_cls.id)) and o["status"] == "run_level" for r in results):
            run_status[rule_cls.id] = (status, reason)
            continue
        try:
            found = _run_level_rule(rule_cls, results, ctx, mem)
        except Skip as exc:
            run_status[rule_cls.id] = ("skipped", str(exc))
            continue
        except Exception as exc:
            logger.exception("rule failed", extra={"rule_id": rule_cls.id})
            run_status[rule_cls.id] = ("error", f"{type(exc).__name__}: {exc}")
            continue
        infos = [r.info for r in results]
        phase = run_phase(results, spec.text)
        run_found[rule_cls.id] = [_per_step(_placed(f, {}, set(), phase), infos) for f in found]
        run_status[rule_cls.id] = ("ok", None)
    findings: list[Finding] = []
    rules: list[RuleStatus] = []
    for rule_cls in ctx.selected:
        rid = rule_cls.id
        if rule_cls.scope == "run":
            own = run_found.get(rid, [])
            status, reason = run_status[rid]
        else:
            # Findings in the order a whole-run pass made them: rule by rule, report by report.
            own = [f for r in results for f in r.findings if f.rule_id == rid]
            status, reason = _merge_outcomes(rule_cls, results)
        findings.extend(own)
        rules.append(RuleStatus(rid, status, reason, len(own) if status == "ok" else 0))
    # The NCCL log's NET rules have their own registry (analysis.diagnosis.nccl): their findings and status here.
    listed = {r.id for r in ctx.registry}
    findings.extend(f for r in results for f in r.findings if f.rule_id not in listed)
    rules.extend(s for s in nccl_rule_statuses(results) if s.rule_id not in listed)
    if by_rule and sum(1 for r in results if r.tool == ToolKind.NSYS) > 1:
        for r in results:
            r.info["findings"] = [finding_json(f) for f in rank_findings(r.findings)]
        findings = roll_up(findings, [r.info for r in results])
    ranked = rank_findings(findings)
    verdicts = _verdicts(results)
    if top is not None:
        ranked = ranked[:top]
    names = [r.label if r.facts.get("rank") is None else f"rank {r.facts['rank']}" for r in results if r.tool == ToolKind.NSYS]
    steps = run_facts.last_per_step(results, ITEMS)
    if steps is not None:
        run_facts.mark_last([r.info for r in results], steps)
        steps["last_by_host"] = steps_by_host(steps, [(r.facts.get("rank"), r.label, r.info.get("host"))
                                                      for r in results if r.tool == ToolKind.NSYS])
    matrix = run_matrix([(r.facts.get("rank"), r.info.get("host"), r.info.get("network")) for r in results
                         if r.tool == ToolKind.NSYS])
    aligned = run_facts.aligned_windows(results, spec.kind)
    # ncu reports' verdicts (analysis.diagnosis.ncu_verdict); the run's when it has no nsys report.
    ncu_lead = ncu_verdict.attach(results)
    # The NCCL logs' network path with each link's achieved bandwidth next to its transport.
    network_path = achieved_links(run_network_path(results), matrix, results)
    verdict = with_network(critical_verdict(run_verdict(verdicts, names), verdicts, names, split) or ncu_lead,
                           results, network_path)
    # Report summaries are JSON up to here: step 1 stores them so (``ReportResult.save``) and the run-level passes
    # (roll-up, verdicts) complete them; they become typed once, here. Findings are ``Finding``s throughout (step 1
    # saves them as JSON and step 2 reads them back as such): the result holds them as the contract reads them.
    return AnalysisResult(
        window=spec.text, reports=tuple(ReportSummary.from_json(r.info) for r in results),
        findings=tuple(FindingResult.from_json(f.to_dict()) for f in ranked), rules=tuple(rules),
        steps=steps,  # multi-rank: which rank finished each iteration last
        aligned_window=None if aligned is None else tuple(aligned),  # multi-rank: where every rank is steady
        verdict=verdict,
        network=matrix,  # NCCL's network transfers: the rank x rank matrix
        collectives=split,  # multi-rank: wait for the last rank vs transfer after it
        network_path=network_path,  # the NCCL log's network path, joined with the run's nsys reports
        # missing ranks, reports apart, logs left out, ranks of a host on one CPU
        run_warnings=tuple(run_warnings([r.info for r in results]) + log_warnings(results) + shared_cpu_warnings(
            [(str(r.info.get("file") or r.label), r.facts.get("rank"), r.info.get("host"), r.facts.get("cpus") or [],
              r.facts.get("cpu_layout") or {})
             for r in results if r.tool == ToolKind.NSYS])) or None)


def _verdicts(results: list[ReportResult]) -> list[Verdict]:
    """Each nsys report's verdict (``analysis.diagnosis.verdict``) over its final findings, kept in its ``info``."""
    out = []
    for r in results:
        if r.tool == ToolKind.NSYS:
            # Facts saved without the verdict's read as none of its keys known.
            verdict = report_verdict(r.info, r.findings, r.facts.get("verdict") or cast("VerdictFacts", {}))
            r.info["verdict"] = verdict.to_json()
            out.append(verdict)
    return out


def _collective_split(results: list[ReportResult], mem: InMemory) -> CollectiveSplit | None:
    """Each matched collective's wait for the last rank and transfer after it (``analysis.diagnosis.rules.nsys.run_nodes``)."""
    parts = run_facts.comm_participants(results, None)
    # one report may hold several ranks (processes): its own clock, the split still applies
    offsets = run_facts.offsets([r.facts.get("session_start_utc_ns") for r, _ in parts]) if parts else None
    if offsets is None:
        return None
    con = mem.connect()
    try:
        described = [{c[0] for c in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()} for _, src in parts]  # noqa: S608
        launch = all("launch_ns" in d for d in described)
        cols = instances(con, [src for _, src in parts], offsets, [run_facts.window_bounds(r) for r, _ in parts],
                         launch, launch and all("launch_off_cpu_ns" in d for d in described))
    finally:
        con.close()
    hosts = [r.info.get("host") for r, _ in parts]
    cols, unpaired = pairs_only(cols)  # send/recv kernels only between a pair: the exports name no peer
    # The rule module builds the split's totals, per rank and per host.
    split = collective_split(cols, [r.facts.get("rank") for r, _ in parts], hosts)
    if unpaired is not None:
        split = CollectiveSplit() if split is None else split
        split["point_to_point_unmatched"] = unpaired
    if split is not None and split.get("per_rank"):  # per instance and rank: whom it waited for; the critical rank
        waits = collective_waits(cols, [r.label if r.facts.get("rank") is None else f"rank {r.facts['rank']}"
                                        for r, _ in parts], hosts, _reference_steps(parts, offsets, cols))
        split.update(waits or {})
    return split


def _name(r: ReportResult) -> str:
    return r.label if r.facts.get("rank") is None else f"rank {r.facts['rank']}"


def _mpi_idle(r: ReportResult) -> np.ndarray | None:
    """The report's GPU idle inside its MPI calls (``analysis.run.mpi.mpi_idle``), None when not written."""
    path = Path(r.facts_dir) / MPI_IDLE_FILE if r.facts.get("mpi") and r.facts_dir is not None else None
    return read_mpi_idle(path) if path is not None and path.exists() else None


def _mpi_split(results: list[ReportResult], mem: InMemory,
               ) -> tuple[MpiSplit | None, dict[str, tuple[int, np.ndarray, np.ndarray]]]:
    """MPI calls across ranks, matched and split (``analysis.run.mpi``), and each participant's waiting."""
    parts = [(r, Path(r.facts_dir) / m) for r in results
             if r.tool == ToolKind.NSYS and (m := r.facts.get("mpi")) and r.facts_dir is not None]
    offsets = run_facts.offsets([r.facts.get("session_start_utc_ns") for r, _ in parts]) if parts else None
    if offsets is None:
        return None, {}
    con = mem.connect()
    try:
        return run_mpi([(_name(r), r.info.get("host"), path, off, run_facts.window_bounds(r))
                        for (r, path), off in zip(parts, offsets, strict=True)], con)
    finally:
        con.close()


def _reference_steps(parts: list[tuple[ReportResult, str]], offsets: list[int], cols: dict[str, np.ndarray],
                     ) -> tuple[int, list[tuple[int, int]]] | None:
    """The first participant with a loop, and its iterations that lie wholly inside its window, on ``cols``'
    clock (its times plus its offset, less the run's earliest arrival ``t0``): the steps the collectives'
    waiting and transfer are summed over for comparisons."""
    if not len(cols.get("t0", [])):
        return None
    t0 = int(cols["t0"][0])
    for k, (r, _) in enumerate(parts):
        it_ = r.facts.get("iterations")
        if not it_:
            continue
        bounds = run_facts.window_bounds(r)
        lo, hi = bounds if bounds is not None else (-(2**62), 2**62)
        steps = [(int(a) + offsets[k] - t0, int(b) + offsets[k] - t0)
                 for a, b in zip(it_["start_ns"], it_["end_ns"], strict=False)
                 if int(a) >= lo and int(b) <= hi]
        if steps:
            return k, sorted(steps)
    return None


def _run_level_rule(rule_cls: type[Rule], results: list[ReportResult], ctx: AnalysisContext,
                    mem: InMemory) -> list[Finding]:
    """A rule of scope ``run`` over the compact facts of the reports it applies to (``Rule.check_facts``)."""
    if rule_cls.scope != "run":  # pragma: no cover - the caller runs only those
        raise RuntimeError(f"no run-level step for {rule_cls.id}")
    parts = run_facts.comm_participants(results, rule_cls.id)
    if not parts:
        return []
    offsets = run_facts.offsets([r.facts.get("session_start_utc_ns") for r, _ in parts])
    if offsets is None:
        raise Skip("a report lacks its session start time, so ranks cannot be aligned on one time base")
    con = mem.connect()
    try:
        facts = RunFacts(con=con, sources=[src for _, src in parts], labels=[r.label for r, _ in parts],
                         ranks=[r.facts.get("rank") for r, _ in parts], hosts=[r.info.get("host") for r, _ in parts],
                         offsets=offsets, windows=[run_facts.window_bounds(r) for r, _ in parts],
                         spans=[int(r.facts.get("span_ns") or 0) for r, _ in parts])
        return rule_cls().check_facts(facts, ctx.all_params[rule_cls.id])
    finally:
        con.close()


def analyze_run(
    reports: list[Path], *, labels: list[str] | None = None, rules: list[str] | None = None,
    thresholds: Mapping[str, float] | None = None, top: int | None = None, memory_bytes: int = DUCKDB_MEMORY_BYTES,
    window: str | None = None, facts_root: Path | None = None, by_rule: bool = True,
) -> AnalysisResult:
    """See ``analysis.api.analyze``: ``analyze_report`` on each report (nsys first, then ncu linked to
    them), then ``analyze_run_facts``. ``facts_root``: where each report's facts go (``<root>/<i>``;
    default a temporary folder removed on return)."""
    ctx = make_context(rules=rules, thresholds=thresholds, window=window, memory_bytes=memory_bytes)
    paths = [Path(p) for p in reports]
    labels = labels or [p.name for p in paths]
    with tempfile.TemporaryDirectory(prefix="goodput-facts-") as tmp:
        root = Path(facts_root) if facts_root is not None else Path(tmp)
        return analyze_paths(paths, labels, ctx, root, top=top, by_rule=by_rule)


def analyze_paths(paths: list[Path], labels: list[str], ctx: AnalysisContext, root: Path, *,
                  top: int | None = None, by_rule: bool = True) -> AnalysisResult:
    """Both steps in this process, the facts of report ``i`` in ``root/<i>``. ``by_rule=False``: findings per
    rank instead of one per rule across ranks (the CLI's JSON and the service hold the latter)."""
    # The first report analyzed here stays open from the read of its tool to the end of its analysis: the
    # analysis's connections then share its DuckDB database (DuckDB keeps a file's database while a connection
    # to it is open, with the same settings: ``ctx.memory_bytes``) instead of opening the file a second time
    # (12 ms of a small report's 0.2 s analysis).
    held: Trace | None = None
    try:
        tools = []
        for p in paths:
            t = Trace(Path(p), Path(p).name, ctx.memory_bytes)
            tools.append(tool_of(t))
            if held is None and step_of(tools[-1]) is AnalysisStep.REPORT:
                held = t
            else:
                t.close()
        results: list[ReportResult | None] = [None] * len(paths)
        for i, (p, label) in enumerate(zip(paths, labels, strict=True)):
            if step_of(tools[i]) is AnalysisStep.REPORT:
                results[i] = analyze_report(p, label, ctx, root / str(i))
                if held is not None:
                    held.close()
                    held = None
    finally:
        if held is not None:
            held.close()
    links = nsys_links([r for r in results if r is not None])
    analyze_run_step_reports(results, tools, paths, labels, ctx, [root / str(i) for i in range(len(paths))], links)
    done = [r for r in results if r is not None]
    rerun_linked_rules(done, paths, labels, ctx)
    return analyze_run_facts(done, ctx, top=top, by_rule=by_rule)


def tool_of(t: Trace) -> str:
    """The tool an open normalized report came from (its meta table): a ``ToolKind`` value."""
    return str(t.meta.get("tool") or t.meta.get("kind") or ToolKind.NSYS.value)


def analyze_run_step_reports(results: list[ReportResult | None], tools: Sequence[str], paths: Sequence[Path],
                             labels: Sequence[str], ctx: AnalysisContext, facts_dirs: Sequence[Path | None],
                             links: Sequence[Mapping[str, Any]]) -> None:
    """The reports of the kinds the run step analyses (``AnalysisStep.RUN``) into ``results`` (in place, by
    index): the NCCL logs together (one job's logs are one network path, ``analysis.run.nccl_step``; the NET
    rules have their own registry, so ``--rules`` selects the others), each ncu report linked to the run's
    nsys kernels."""
    logs = [i for i, tool in enumerate(tools) if tool == ToolKind.NCCL]
    if logs:
        for i, res in zip(logs, analyze_logs([(Path(paths[i]), labels[i]) for i in logs], ctx.spec.text,
                                             ctx.thresholds), strict=True):
            results[i] = res
    for i, tool in enumerate(tools):
        if tool != ToolKind.NCCL and step_of(tool) is AnalysisStep.RUN:
            results[i] = analyze_report(Path(paths[i]), labels[i], ctx, facts_dirs[i], nsys_links=links)


def nsys_links(results: list[ReportResult]) -> list[NsysKernelsJson]:
    """The nsys reports' kernel groups, in run order: what an ncu report of the same run links to (as saved with
    each report's facts: ``kernels_to_json``)."""
    return [k for r in results if r.tool == ToolKind.NSYS and (k := r.facts.get("nsys_kernels"))]


@functools.cache
def _pacing_rule_ids() -> frozenset[str]:
    """The rules that judge the idle a host-paced loop shows between iterations: its pacing, not a defect."""
    return frozenset(r.id for r in default_registry() if r.judges_pacing_idle)


def _placed(f: Finding, phase_by_label: dict[str, str], paced: set[str], spec: str) -> Finding:
    """A finding with its phase (the report's window, or the run's for run-level findings); on a
    host-paced loop the idle rules are information, not defects."""
    if f.phase is None:
        f = dataclasses.replace(f, phase=phase_by_label.get(f.report or "", spec if f.report is None else None))
    if f.report in paced and f.rule_id in _pacing_rule_ids():
        f = dataclasses.replace(f, severity="info", message=f.message + " The loop is host-paced (the GPU waits "
                                "for each frame or request by design): this idle is its pacing, not a GPU defect.",
                                host_paced=True)
    return f


def _per_step(f: Finding, infos: Sequence[ReportInfo]) -> Finding:
    """A finding judged on a window that is a stretch of the loop (the steady state, or iterations A to B)
    gains its impact per step: the impact over the number of iterations wholly inside the window
    (``impact_per_step_ns``, ``steps_in_window``). Report-level findings use their report's iterations;
    run-level ones, when every nsys report's window holds iterations, the fewest of them (the steps all
    ranks went through). Findings about another phase (start-up, warm-up) stay totals."""
    counts = {}
    for info in infos:
        ana = _anatomy_of(info)
        if ana and ana.get("steady_count") and info["window"]["phase"] in LOOP_WINDOWS:
            counts[info["file"]] = (int(ana["steady_count"]), info["window"]["phase"])
    hit: tuple[int, str | None] | None
    if f.report is not None:
        hit = counts.get(f.report)
    else:
        nsys = [info["file"] for info in infos if info.get("tool") == ToolKind.NSYS]
        least = min((counts[n] for n in nsys), default=None) if nsys and all(n in counts for n in nsys) else None
        hit = (least[0], f.phase) if least else None
    if hit is None or hit[1] != f.phase or not f.impact_ns:
        return f
    n = hit[0]
    return dataclasses.replace(f, impact_per_step_ns=int(round(f.impact_ns / n)), steps_in_window=n)


__all__ = ["AnalysisContext", "ReportResult", "analyze_run_step_reports", "analyze_report", "analyze_run", "analyze_run_facts",
           "make_context"]
