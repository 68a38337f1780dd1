"""COMM001 exposed collective communication per device/rank, COMM002 stragglers across ranks."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import fmt
from analysis.diagnosis.breakdown import breakdown
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, RunFacts, Skip, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, load_sql, pct, report_span_ns
from analysis.diagnosis.rules.nsys.serialized import serialized_exposed
from analysis.model.trace import Trace, inline_params
from analysis.results import CommOverlapExtra, StragglerExtra


@dataclass(frozen=True)
class Participant:
    """A report taking part in COMM002: its label and rank, and its GPU-active span (lazily: only the
    straggler's is needed, for the impact's share)."""

    label: str
    rank: int | None
    span_ns: Callable[[], int]


def _who(p: Participant, pid: int, n_reports: int) -> str:
    """A participant's name: its rank from the report's metadata, else its pid (and file, if several)."""
    if p.rank is not None:
        return f"rank {p.rank}"
    return f"pid {pid}" if n_reports == 1 else f"{Path(p.label).name} pid {pid}"


def _in_window(bounds: tuple[int, int] | None) -> str:
    """SQL predicate over a kernels row: it is in the analysis window ``bounds`` (overlaps it, or a
    zero-length row starts in it; ``Trace.windowed``'s rule). TRUE without a window."""
    if bounds is None:
        return "TRUE"
    lo, hi = (int(v) for v in bounds)
    return f"(start_ns < {hi} AND (start_ns >= {lo} OR end_ns > {lo}))"


def _has_nccl(trace: Trace) -> bool:
    return trace.scalar("SELECT 1 FROM kernels WHERE category = 'nccl' LIMIT 1") is not None


NO_COMPUTE_ADVICE = ("Nothing to overlap: these devices run no compute kernels. Split the collectives' time into "
                     "waiting for the last rank and transfer (a run of all ranks: the collectives split, COMM002) and "
                     "compare the transfer's bandwidth with the link (COMM003, NCCL_DEBUG=INFO for message sizes).")


class ExposedCommunication(Rule):
    """Exposed collective communication: NCCL kernel time with no compute kernel running beside it.

    *Why it matters*: communication hidden under compute is free; communication the GPU waits for is
    step time added directly. The share of the step that is exposed, in milliseconds, is what scaling
    work has to bring down (an overlap ratio alone hides how much time is at stake).

    *How it is detected*: per process and device (a rank), the union of NCCL kernel intervals minus
    the union of compute kernel intervals (the breakdown's ``comm_exposed_ns``, a sweep over both
    unions, so concurrent streams are never counted twice), less the part COMM004 owns (NCCL kernels
    on a stream that also runs compute). Reported when it is at least ``min_exposed_pct`` of the
    device's active span. Impact: that exposed time.

    *Premise*: overlap needs compute to overlap with. On devices where no compute kernel ran (a
    communication benchmark, a rank that only moves data) the advice is not to overlap but to look at the
    collectives themselves: their bandwidth (COMM003) and the waiting for late ranks (COMM002, the run's
    ``collectives`` split), which is not communication cost.
    """

    id = "COMM001"
    extra_type = CommOverlapExtra
    name = "comm.exposed-communication"
    verdict_kind = "communication"
    next_step = "overlap communication with compute (bucketing, separate streams)"
    run_split = "collective_waiting"
    category = "communication"
    requires = ("kernels",)
    thresholds = {
        "min_exposed_pct": Threshold(1.0, "%", "report a device whose exposed share of its span is at least this",
                                     minimum=0.0, maximum=100.0),
    }
    summary = "NCCL time not overlapped by compute, per device and rank"
    advice = (
        "Overlap communication with compute: bucketed all-reduce during backward (DDP bucket_cap_mb, FSDP"
        " prefetch), collectives on a side stream, fewer and larger collectives.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        if not _has_nccl(trace):
            return []
        bd = breakdown(trace)
        serial = serialized_exposed(trace)  # COMM004 > COMM001: NCCL on a compute stream is COMM004's
        devices = [dataclasses.replace(u, comm_exposed_ns=u.comm_exposed_ns
                                       - serial.get((u.pid, u.device), {}).get("exposed_ns", 0))
                   for u in bd.devices]
        units = [u for u in devices
                 if u.comm_exposed_ns > 0 and (pct(u.comm_exposed_ns, u.span_ns) or 0) >= ctx.params["min_exposed_pct"]]
        if not units:
            return []
        units.sort(key=lambda u: (-u.comm_exposed_ns, u.pid or 0, u.device or 0))
        exposed = sum(u.comm_exposed_ns for u in units)
        comm = sum(u.comm_exposed_ns + u.comm_overlapped_ns for u in units)
        evidence = tuple(
            Evidence(start_ns=u.start_ns, end_ns=u.end_ns, device=u.device, pid=u.pid, rank=trace.rank,
                     value_ns=u.comm_exposed_ns,
                     detail={"comm_ns": u.comm_exposed_ns + u.comm_overlapped_ns,
                             "comm_overlapped_ns": u.comm_overlapped_ns, "span_ns": u.span_ns,
                             "exposed_pct": round(pct(u.comm_exposed_ns, u.span_ns) or 0, 3)})
            for u in units)
        share = pct(exposed, bd.span_ns)
        overlap = pct(comm - exposed, comm) or 0.0
        has_compute = any(u.compute_ns > 0 for u in units)
        return [Finding(
            rule_id=self.id,
            title=f"Exposed communication {fmt_ms(exposed)} on {fmt.count(len(units))} device(s)",
            message=(f"NCCL kernels ran {fmt_ms(comm)}; {fmt_ms(exposed)} of it with no compute beside it"
                     + (f" ({fmt.pct(share)} of the GPU-active span)" if share is not None else "")
                     + f", {fmt.pct(overlap)} overlapped."
                     + ("" if has_compute else " No compute kernel ran on these devices: there is nothing to overlap "
                        "it with, and part of it may be waiting for other ranks rather than moving data.")),
            impact_ns=exposed, impact_pct=share,
            advice=self.advice if has_compute else NO_COMPUTE_ADVICE,
            evidence=evidence, evidence_total=len(units), report=trace.label, rank=trace.rank,
            extra=CommOverlapExtra(comm_ns=comm, comm_exposed_ns=exposed, overlap_pct=round(overlap, 3),
                                              has_compute=has_compute),
        )]


class Stragglers(Rule):
    """Stragglers: one rank reaching the collectives late, so every other rank waits inside NCCL.

    *Why it matters*: a collective completes only when the last rank arrives; the others spin in the
    NCCL kernel meanwhile. One slow rank (a slower GPU, a busier host, uneven data) slows the job.

    *How it is detected*: the participants are the processes with NCCL kernels in the run's nsys
    reports; each is named by the rank in its report's metadata (never the order of files), or by the
    report and pid when several ranks share one file. Collective instances are matched by kernel name
    and order of occurrence (the communicator's issue order), on the run's time base (each
    report's times plus its session start's distance from the earliest one, ``Run.offsets``). Only
    instances inside the analysis window count: every participant's kernel of the instance lies in its
    report's window (occurrences are numbered over the whole reports, so the matching does not depend
    on the window). Per instance the arrival skew is the last start minus the first;
    instances with a skew of at least ``min_skew_us`` count. The straggler is the participant that
    arrives last most often. Impact: the summed skew of the instances where it is last (the wall time
    the job would save if it arrived with the others).
    """

    id = "COMM002"
    extra_type = StragglerExtra
    name = "comm.stragglers"
    verdict_kind = "communication"
    next_step = "balance the ranks' work so none waits for a straggler"
    scope = "run"
    category = "communication"
    requires = ("kernels",)
    thresholds = {"min_skew_us": Threshold(100.0, "us", "smallest arrival skew counted (above clock noise)",
                                           minimum=0.0, maximum=MAX_US)}
    summary = "Ranks that arrive late to collectives and make the others wait"
    advice = (
        "Look at what the straggler does before each collective (NVTX, data loading, CPU contention, throttling, "
        "uneven shards) and balance the work across ranks.")

    def check(self, ctx: RuleContext) -> list[Finding]:
        run = ctx.run
        traces = [t for t in self.applicable(run) if _has_nccl(t)]
        if not traces:
            return []
        offsets = run.offsets(traces)
        if offsets is None:
            raise Skip("a report lacks its session start time, so ranks cannot be aligned on one time base")
        # The reports' own kernels tables, as attached to the run's connection (what the facts of
        # analysis.run.facts hold: every NCCL kernel of the report).
        sources = [f"{run.alias(t)}.kernels" for t in traces]
        who = [Participant(t.label, t.rank, functools.partial(report_span_ns, t)) for t in traces]
        windows = [None if t.window is None else (int(t.window[0]), int(t.window[1])) for t in traces]
        return stragglers(run.con, sources, who, offsets, ctx.params, self.id, windows=windows)

    def check_facts(self, facts: RunFacts, params: Mapping[str, float]) -> list[Finding]:
        who = [Participant(label, rank, functools.partial(int, span))
               for label, rank, span in zip(facts.labels, facts.ranks, facts.spans, strict=True)]
        return stragglers(facts.con, facts.sources, who, facts.offsets, params, self.id, windows=facts.windows)


def stragglers(con: Any, sources: list[str], who: list[Participant], offsets: list[int],
               params: Mapping[str, float], rule_id: str, *,
               windows: list[tuple[int, int] | None] | None = None) -> list[Finding]:
    """COMM002 on a DuckDB connection where ``sources[i]`` is a relation of participant ``i``'s NCCL
    kernels (``pid, device, name, start_ns, end_ns``, at least; other kernels are filtered out when a
    ``category`` column says so), ``offsets[i]`` its time-base offset (``Run.offsets``) and
    ``windows[i]`` its analysis window in its own times (None: all of it). A collective counts when every
    participant's kernel of it lies in that participant's window; occurrences are numbered over the whole
    reports, so that the matching is the same whatever the window."""
    windows = windows or [None] * len(sources)
    # Times in HUGEINT: the aligned times of any clock (even ~2^62) and their differences cannot overflow.
    parts = " UNION ALL ".join(
        f"SELECT {i} AS part, pid, device, name, start_ns::HUGEINT + {int(off)} AS t, {_in_window(w)} AS inw "  # noqa: S608 - ints, server-made sources
        f"FROM {src} WHERE category = 'nccl' AND start_ns IS NOT NULL"
        for i, (src, off, w) in enumerate(zip(sources, offsets, windows, strict=True)))
    min_skew = {"min_skew_ns": int(params["min_skew_us"] * 1000)}
    try:
        # One pass over the kernels: the instances, per-instance and per-participant facts materialized
        # once, then read by the three small queries below.
        for stmt in load_sql("stragglers.sql").replace("{parts}", parts).split("-- next statement"):
            # Parameters written in as literals: binding them makes DuckDB import pandas (0.25 s).
            con.execute(*inline_params(stmt, min_skew if "$min_skew_ns" in stmt else None))
        rows = con.execute("""SELECT part, pid, times_last, skew_when_last, waited, imposed FROM _gp_comm_part
                              ORDER BY times_last DESC, skew_when_last DESC, part, pid""").fetchall()
        if len(rows) < 2 or rows[0][2] == 0:
            return []
        part, pid = rows[0][0], rows[0][1]
        top = con.execute(*inline_params("""SELECT name, k, first_t, last_t, skew, who.device FROM _gp_comm_last
                             WHERE who.part = $p AND who.pid = $pid ORDER BY skew DESC, first_t, name LIMIT 20""",
                          {"p": part, "pid": pid})).fetchall()
        n_inst = con.execute(*inline_params(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE skew >= $min_skew_ns) FROM _gp_comm_last", min_skew)).fetchall()[0]
    finally:
        con.execute("DROP TABLE IF EXISTS _gp_comm_part; DROP TABLE IF EXISTS _gp_comm_last; "
                    "DROP TABLE IF EXISTS _gp_comm_inst")
    p = who[part]
    label = _who(p, pid, len(who))
    impact = int(rows[0][3])
    offset = offsets[part]
    evidence = tuple(
        Evidence(start_ns=int(r[2]) - offset, end_ns=int(r[3]) - offset, device=r[5], pid=pid, rank=p.rank,
                 name=r[0], value_ns=int(r[4]), detail={"instance": int(r[1]) - 1, "straggler": label})
        for r in top)
    per = {_who(who[w[0]], w[1], len(who)): {"times_last": int(w[2]), "skew_when_last_ns": int(w[3]),
                                             "waited_ns": int(w[4])} for w in rows}
    return [Finding(
        rule_id=rule_id,
        title=f"Straggler: {label} arrives last at {fmt.count(rows[0][2])} of {fmt.count(n_inst[1])} skewed collectives",
        message=(f"Across {fmt.count(len(rows))} participants and {fmt.count(n_inst[0])} matched collectives, {label} arrived last "
                 f"{fmt.count(rows[0][2])} time(s) with a skew of at least {fmt.exact(params['min_skew_us'])} us, delaying them by "
                 f"{fmt_ms(impact)} in all; the others waited {fmt_ms(int(rows[0][5]))} (summed over ranks)."),
        impact_ns=impact, impact_pct=pct(impact, p.span_ns()),
        advice=Stragglers.advice,
        evidence=evidence, evidence_total=int(rows[0][2]), report=None, rank=p.rank,
        extra=StragglerExtra(participants=per, matched_collectives=int(n_inst[0]),
                                        wait_imposed_ns=int(rows[0][5])),
    )]
