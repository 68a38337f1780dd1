"""Compact per-report facts for the cross-rank step of an analysis, and that step's pieces.

Each nsys report's step 1 (``analysis.run.runner.analyze_report``) leaves:

- ``collectives.parquet`` (in the report's facts folder): every NCCL kernel instance of the report,
  one row each: ``pid, device, name, category ('nccl'), kind`` (AllReduce, AllGather, ... parsed from
  the kernel name; NULL when the name says none), ``order`` (1-based occurrence of that kernel name in
  its process, the communicator's issue order), ``start_ns, end_ns`` (session-relative, as in the
  report), ``size_bytes`` (NULL: the normalized kernels table carries no message size), and the
  ``stream``, ``op``, ``algo`` and ``proto`` COMM003 groups by, and ``launch_ns``: the start of the host's
  API call that launched it (NULL when the trace has none), ``launch_end_ns`` its end, and
  ``launch_off_cpu_ns``: how long the launching thread was switched out inside that call (scheduler
  events; NULL when the trace has none). Written by DuckDB straight from the report,
  so step 1 never holds it in Python.
- in ``analysis.json`` (``ReportResult.facts``): rank, session start, the loop's iterations
  (``start_ns``, ``end_ns`` of every iteration; ``busy_ns``, the GPU busy time of those inside the
  analysis window, else None), whether the window has NCCL kernels, the report's GPU-active span in
  its window, and its kernel groups for ncu linking.

Step 2 reads only these: COMM002 over the collectives tables (DuckDB, bounded memory, spilling to disk),
the per-step slowest rank over the iterations.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, Required, TypedDict, cast

import duckdb
import numpy as np

from analysis.diagnosis.findings import Finding
from analysis.diagnosis.ncu.impact import NsysKernelsJson
from analysis.diagnosis.rules.base import split_in_run
from analysis.diagnosis.rules.nsys.collectives import (
    ALGO_SQL,
    GROUP_STATS_SQL,
    OP_SQL,
    PROTO_SQL,
    bounded_ranks,
    group_stats,
)
from analysis.diagnosis.rules.nsys.common import report_span_ns
from analysis.diagnosis.rules.nsys.run_nodes import HostSteps
from analysis.diagnosis.rules.registry import default_registry, finding_extras
from analysis.diagnosis.verdict import VerdictFacts
from analysis.loops import window as win
from analysis.loops.phases import Loop
from analysis.model.trace import Trace, clock_offsets
from analysis.readers import ToolKind
from analysis.report_types import FindingJson, ReportInfo, RuleOutcome
from analysis.result_parts import StepRecord
from analysis.results import CollectiveExtra
from analysis.run.cpus import CpuTime

RESULT_FILE = "analysis.json"

COLLECTIVES_FILE = "collectives.parquet"
KIND_RE = r"(AllReduce|AllGather|ReduceScatter|AllToAll|Broadcast|Reduce|SendRecv|Send|Recv)"


@functools.cache
def _extra_types() -> dict[str, type]:
    return finding_extras()


def finding_from_json(data: FindingJson) -> Finding:
    """A finding as step 1 saved it (``Finding.to_dict``), its rule's own keys read as its rule's ``extra_type``."""
    return Finding.from_dict(data, _extra_types().get(data["rule_id"]))


def finding_json(f: Finding) -> FindingJson:
    """A finding as JSON (``Finding.to_dict``), typed as such: what step 1 saves and reports list."""
    return cast("FindingJson", f.to_dict())


class IterationFacts(TypedDict):
    """Every iteration of the report's loop: start and end, and GPU busy time where the window has it (None)."""

    start_ns: list[int]
    end_ns: list[int]
    busy_ns: list[int | None]


class ReportFacts(TypedDict, total=False):
    """A report's compact facts for step 2 (``ReportResult.facts``, saved in ``analysis.json``): its rank and
    session start (every report); an nsys report's verdict facts, iterations, kernel groups for ncu linking,
    whether its window has NCCL kernels (and its GPU-active span there), whether NCCL's payloads gave message
    sizes, its collectives and MPI files (in its facts folder), its processes' time per logical CPU and the CPU
    layout its export records (meta ``cpu_logical``, ``cpu_sockets``)."""

    rank: Required[int | None]
    session_start_utc_ns: Required[int | None]
    verdict: VerdictFacts
    iterations: IterationFacts
    nsys_kernels: NsysKernelsJson | None
    nccl_in_window: bool
    span_ns: int | None
    nccl_sized: bool
    collectives: str | None
    mpi: str | None
    cpus: list[CpuTime]
    cpu_layout: dict[str, str]


class ReportResultJson(TypedDict):
    """A report's step-1 outcome as saved (``analysis.json``): its label, tool, window spec, summary, placed findings,
    each rule's outcome and the facts for step 2."""

    label: str
    tool: str
    window: str
    info: ReportInfo
    findings: list[FindingJson]
    rules: dict[str, RuleOutcome]
    facts: ReportFacts


@dataclass
class ReportResult:
    """Step 1's outcome for one report: its ``reports[]`` object, its placed findings (in rule order; step 2
    completes them: ``analysis.run.waiting``), each selected rule's outcome on it, and the facts for step 2
    (``facts_dir`` holds the collectives table). Saved as JSON (``to_json``: the findings' ``Finding.to_dict``) and
    read back typed (``finding_from_json``)."""

    label: str
    tool: str
    info: ReportInfo
    findings: list[Finding]
    rules: dict[str, RuleOutcome]  # rule id -> its outcome on this report
    facts: ReportFacts
    facts_dir: Path | None = None
    window: str = win.DEFAULT

    def to_json(self) -> ReportResultJson:
        return {"label": self.label, "tool": self.tool, "window": self.window, "info": self.info,
                "findings": [finding_json(f) for f in self.findings], "rules": self.rules, "facts": self.facts}

    @classmethod
    def from_json(cls, data: ReportResultJson, facts_dir: Path | None) -> ReportResult:
        return cls(data["label"], data["tool"], data["info"], [finding_from_json(f) for f in data["findings"]],
                   data["rules"], data["facts"],
                   facts_dir, data.get("window", win.DEFAULT))

    def save(self, folder: Path) -> Path:
        """Write ``analysis.json`` into ``folder`` (beside the collectives table); returns its path."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / RESULT_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, folder: Path) -> ReportResult:
        return cls.from_json(json.loads((folder / RESULT_FILE).read_text()), folder)


def iteration_facts(loop: Loop | None, records: list[StepRecord]) -> IterationFacts:
    """Every iteration's start and end (the whole loop), and GPU busy time where the window has it."""
    if loop is None or not len(loop):
        return {"start_ns": [], "end_ns": [], "busy_ns": []}
    busy: list[int | None] = [None] * len(loop)
    for r in records:
        busy[r.index] = r.gpu_busy_ns
    return {"start_ns": [int(x) for x in loop.starts], "end_ns": [int(x) for x in loop.ends], "busy_ns": busy}


def span_ns(trace: Trace) -> int:
    """The report's GPU-active span (COMM002's denominator for the straggler's share)."""
    return report_span_ns(trace)


def write_collectives(trace: Trace, folder: Path) -> str | None:
    """Write the report's NCCL kernel instances to ``folder/collectives.parquet``; returns the file name
    (relative to ``folder``), or None when the report has no kernels table."""
    if "kernels" not in trace.tables:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / COLLECTIVES_FILE
    tmp = folder / (COLLECTIVES_FILE + ".tmp")
    quoted = str(tmp).replace("'", "''")  # server-made paths; quoted all the same
    # The host's launch of each NCCL kernel: the start of the API call it correlates with in its process.
    # and its end and how long its thread was switched out inside it (descheduled: not the GPU's queue).
    off = ("""LEFT JOIN (SELECT a.pid, a.correlation_id, SUM(LEAST(o.end_ns, a.end_ns) - GREATEST(o.start_ns, a.start_ns))
                             AS off_ns
                      FROM (SELECT pid, correlation_id, arg_min(tid, start_ns) AS tid, MIN(start_ns) AS start_ns,
                                   arg_min(end_ns, start_ns) AS end_ns FROM cuda_api
                            WHERE correlation_id IS NOT NULL GROUP BY ALL) a
                      JOIN off_cpu o ON o.pid = a.pid AND o.tid = a.tid AND o.start_ns < a.end_ns AND o.end_ns > a.start_ns
                      GROUP BY ALL) o USING (pid, correlation_id)""" if "off_cpu" in trace.tables else "")
    launch = (f"""LEFT JOIN (SELECT pid, correlation_id, MIN(start_ns) AS launch_ns,
                                   arg_min(end_ns, start_ns) AS launch_end_ns FROM cuda_api
                            WHERE correlation_id IS NOT NULL GROUP BY ALL) a
                USING (pid, correlation_id) {off}""" if "cuda_api" in trace.tables else "")  # noqa: S608 - constants
    trace.con.execute(f"""
        COPY (SELECT pid, device, name, category,
                     NULLIF(regexp_extract(name, '{KIND_RE}', 1), '') AS kind,
                     ROW_NUMBER() OVER (PARTITION BY pid, name ORDER BY start_ns, end_ns) AS "order",
                     start_ns, end_ns, NULL::BIGINT AS size_bytes, stream,
                     {OP_SQL} AS op, {ALGO_SQL} AS algo, {PROTO_SQL} AS proto,
                     {"launch_ns, launch_end_ns" if launch else "NULL::BIGINT AS launch_ns, NULL::BIGINT AS launch_end_ns"},
                     {"COALESCE(off_ns, 0)::BIGINT" if off else "NULL::BIGINT"} AS launch_off_cpu_ns
              FROM (SELECT * FROM kernels WHERE category = 'nccl' AND start_ns IS NOT NULL) k {launch}
              ORDER BY start_ns, pid, name)
        TO '{quoted}' (FORMAT parquet)""")  # noqa: S608 - constants and a server-made path
    tmp.replace(path)
    return COLLECTIVES_FILE


def comm003_across(results: list[ReportResult], open_con: Callable[[], duckdb.DuckDBPyConnection]) -> None:
    """Multi-rank runs without NCCL message sizes: every rank's share of each collective group of COMM003's
    by-kernel findings, from the reports' collectives facts (each in its window, kernels clipped to it as
    the rule's own view clips them). Fills each group's ``ranks`` in place. Reads them on an in-memory
    connection (``open_con()``: the run-level step's), opened only when there is something to fill."""
    ids = split_in_run(default_registry(), "ranks")
    found = [f for r in results for f in r.findings
             if f.rule_id in ids and isinstance(f.extra, CollectiveExtra) and f.extra.sizes == "by kernel"]
    sources = [(r, Path(r.facts_dir) / c) for r in results
               if r.tool == ToolKind.NSYS and r.facts_dir is not None and (c := r.facts.get("collectives"))
               and r.facts.get("nccl_in_window")]
    if not found or len(sources) < 2:
        return  # one report: the rule already listed its own processes and devices
    con = open_con()
    try:
        _comm003_ranks(found, sources, con)
    finally:
        con.close()


def _comm003_ranks(found: list[Finding], sources: list[tuple[ReportResult, Path]],
                   con: duckdb.DuckDBPyConnection) -> None:
    entries: dict[tuple, list[dict[str, Any]]] = {}
    for r, path in sources:
        if "op" not in {row[0] for row in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()}:
            return  # facts written before these columns: leave each report's own
        lo, hi = window_bounds(r) or (-(2**63), 2**63 - 1)
        rows = con.execute(f"""
            WITH k AS (SELECT pid, device, op, algo, proto, LEAST(end_ns, $hi) - GREATEST(start_ns, $lo) AS d
                       FROM read_parquet($path) WHERE category = 'nccl' AND start_ns IS NOT NULL
                         AND end_ns > start_ns AND end_ns > $lo AND start_ns < $hi)
            {GROUP_STATS_SQL}""", {"path": str(path), "lo": lo, "hi": hi}).fetchall()  # noqa: S608 - constants
        for op, algo, proto, whole, pid, dev, *numbers in rows:
            if not whole:
                entries.setdefault((op or None, algo or None, proto or None), []).append(
                    {"report": r.label, "rank": r.facts.get("rank"), "pid": pid, "device": dev, **group_stats(numbers)})
    for f in found:
        for g in f.extra.groups if isinstance(f.extra, CollectiveExtra) else []:
            key = (g["op"], g["algorithm"], g["protocol"])
            if key in entries:  # the group's JSON row, completed in place
                cast("dict[str, object]", g).update(bounded_ranks(entries[key], f.report or "", "time_ns"))


def _status(r: ReportResult, rule_id: str) -> str | None:
    """The rule's status on the report (None: the report has no outcome for it)."""
    o = r.rules.get(rule_id)
    return o["status"] if o else None


def comm_participants(results: list[ReportResult], rule_id: str | None) -> list[tuple[ReportResult, str]]:
    """The reports a cross-rank rule (COMM002, COMM005) compares, in run order, with a DuckDB relation of
    each one's collectives: nsys reports to which the rule applies (any, with ``rule_id`` None) whose
    window has NCCL kernels."""
    out = []
    for r in results:
        f = r.facts
        if r.tool != ToolKind.NSYS or (rule_id is not None and _status(r, rule_id) != "run_level"):
            continue
        c = f.get("collectives")
        if not f.get("nccl_in_window") or not c or r.facts_dir is None:
            continue
        path = str((Path(r.facts_dir) / c).resolve()).replace("'", "''")
        out.append((r, f"read_parquet('{path}')"))
    return out


def offsets(starts: list[int | None]) -> list[int] | None:
    return clock_offsets(starts)


def _pairing(ends: list[np.ndarray]) -> list[int]:
    """Per loop, the index shift ``d`` that pairs its iteration ``j`` with the longest loop's ``j + d``.

    Loops of equal length pair by index. A shorter loop (a rank whose capture began or ended an iteration
    or more apart) is placed inside the longest where its iterations' ends, on the absolute clock, lie
    closest to the longest loop's (the smallest median distance; the smallest shift on ties), among the
    shifts that put its first iteration at the longest loop's nearest ones on the clock, or either end."""
    ref = ends[int(np.argmax([len(e) for e in ends]))]
    out = []
    for e in ends:
        room = len(ref) - len(e)
        near = int(np.searchsorted(ref, e[0]))
        cands = sorted({d for d in (0, room, near - 1, near, near + 1) if 0 <= d <= room})
        cost = [float(np.median(np.abs(e - ref[d:d + len(e)]))) for d in cands]
        out.append(cands[int(np.argmin(cost))])
    return out


class StepItem(TypedDict):
    index: int
    last: str
    spread_ns: int


class LastPerStep(TypedDict):
    """Which rank finished each step last (``last_per_step``): steps, how often each rank was last, the median
    spread, the first steps, each report's first iteration of step 0 when not paired by index, and (popped by
    ``mark_last`` before the result is written) per report its steps' last ranks and spreads."""

    count: int
    last: dict[str, int]
    spread_median_ns: float
    items: list[StepItem]
    first_iteration: NotRequired[dict[str, int]]
    last_by_host: NotRequired[list[HostSteps]]  # added by the runner
    _by_report: NotRequired[dict[str, tuple[int, list[str], Any]]]


class AlignedWindow(TypedDict):
    """One report's part of the stretch every rank is steady in (``aligned_windows``), in its own times."""

    report: str
    rank: int | None
    start_ns: int
    end_ns: int


def last_per_step(results: list[ReportResult], items: int) -> LastPerStep | None:
    """Multi-rank runs: per iteration, which report (rank) finished it last on the absolute clock, and
    by how much after the first. Iterations pair by index when every rank's loop has the same count,
    else as ``_pairing`` aligns them; a step exists where every rank has an iteration."""
    loops = [(r, np.asarray(it["end_ns"], dtype=np.int64)) for r in results
             if r.tool == ToolKind.NSYS and (it := r.facts.get("iterations")) and len(it["end_ns"])]
    starts = [r.facts.get("session_start_utc_ns") for r, _ in loops]
    if len(loops) < 2 or any(s is None for s in starts):
        return None
    # On the clock of the earliest session: start differences, never sums of absolute clocks (int64).
    base = min(int(s or 0) for s in starts)
    aligned = [e + (int(s or 0) - base) for (_, e), s in zip(loops, starts, strict=True)]
    shift = _pairing(aligned)
    first = max(shift)
    stop = min(d + len(e) for d, e in zip(shift, aligned, strict=True))
    if stop <= first:
        return None
    ends = np.stack([e[first - d:stop - d] for d, e in zip(shift, aligned, strict=True)])
    last = np.argmax(ends, axis=0)
    spread = ends.max(axis=0) - ends.min(axis=0)
    ranks = [r.facts.get("rank") for r, _ in loops]
    names = [f"rank {k}" if k is not None else r.label for (r, _), k in zip(loops, ranks, strict=True)]
    if len(set(names)) < len(names):  # ranks missing or repeated in the metadata: the reports' labels
        names = [r.label for r, _ in loops]
    counts = np.bincount(last, minlength=len(loops))
    out: LastPerStep = {
        "count": int(ends.shape[1]), "last": {names[k]: int(c) for k, c in enumerate(counts)},
        "spread_median_ns": float(np.median(spread)),
        "items": [{"index": j, "last": names[int(last[j])], "spread_ns": int(spread[j])}
                  for j in range(min(ends.shape[1], items))]}
    if any(d != first for d in shift):  # not paired by index: each report's first iteration of step 0
        out["first_iteration"] = {names[k]: first - d for k, d in enumerate(shift)}
    # Per report: its iteration index -> (rank that finished that step last, spread), for its records.
    out["_by_report"] = {r.label: (first - d, [names[int(k)] for k in last], spread)
                         for (r, _), d in zip(loops, shift, strict=True)}
    return out


def mark_last(infos: list[ReportInfo], steps: LastPerStep) -> None:
    """Each report's per-iteration records gain ``last`` (the rank that finished that step last on the
    absolute clock) and ``spread_ns`` (how long after the first it did), where the step exists."""
    by_report = steps.pop("_by_report")
    for info in infos:
        hit = by_report.get(info["file"])
        ana = (info.get("iterations") or {}).get("anatomy")
        if hit is None or ana is None:
            continue
        at, last, spread = hit
        for rec in (*ana["records"], *ana["slowest_steps"]):
            j = rec["index"] - at
            if 0 <= j < len(last):
                rec["last"], rec["spread_ns"] = last[j], int(spread[j])


def window_bounds(r: ReportResult) -> tuple[int, int] | None:
    """The report's analysis window in its own times (None: the whole report)."""
    w = r.info.get("window")
    if w is None or w["start_ns"] is None or w["end_ns"] is None:
        return None
    return int(w["start_ns"]), int(w["end_ns"])


def aligned_windows(results: list[ReportResult], spec_kind: str) -> list[AlignedWindow] | None:
    """Several nsys reports analyzed on their steady windows: the stretch all of them are steady in, the
    intersection of their windows on the absolute clock, in each report's own times (None when the
    reports do not all have a steady window and a session start, or the windows do not overlap).

    Each report's rules look at its own steady window (step 1 runs before the other ranks exist); this
    is where the ranks overlap, for comparing them over the same stretch."""
    results = [r for r in results if r.tool != ToolKind.NCCL]  # a log has no timeline to align
    if spec_kind != "steady" or len(results) < 2 or any(r.tool != ToolKind.NSYS for r in results):
        return None
    bounds: list[tuple[int, int]] = []
    for r in results:
        w = r.info.get("window")
        if w is None or w["start_ns"] is None or w["end_ns"] is None:
            return None
        bounds.append((w["start_ns"], w["end_ns"]))
    off = clock_offsets([r.facts.get("session_start_utc_ns") for r in results])
    if off is None:
        return None
    lo = max(int(b[0]) + o for b, o in zip(bounds, off, strict=True))
    hi = min(int(b[1]) + o for b, o in zip(bounds, off, strict=True))
    if lo >= hi:
        return None
    return [{"report": r.label, "rank": r.facts.get("rank"), "start_ns": lo - o, "end_ns": hi - o}
            for r, o in zip(results, off, strict=True)]
