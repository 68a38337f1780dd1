"""COMM005: a whole node late to the collectives."""

from __future__ import annotations

from collections.abc import Mapping

from analysis.diagnosis.findings import Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, RunFacts, Skip, Threshold
from analysis.diagnosis.rules.nsys.comm import _has_nccl
from analysis.diagnosis.rules.nsys.common import report_span_ns
from analysis.diagnosis.rules.nsys.run_nodes import instances, late_node
from analysis.results import LateNodeExtra


class LateNode(Rule):
    """Late node: every rank of one host reaching the collectives after every rank of the other hosts.

    *Why it matters*: when a whole node is late, the cause is what its ranks share (the node's input
    pipeline, CPU or memory pressure, another job on it, its NICs), not one GPU; COMM002 names only the
    single last rank, which on such a node changes from step to step.

    *How it is detected*: the collective instances COMM002 matches (kernel name and occurrence, on the
    run's time base, inside every rank's window), the ranks grouped by the host their report names. A
    host of two ranks or more is late in an instance when its earliest rank arrives at least
    ``min_skew_us`` after the last rank of every other host; reported when that holds in at least
    ``min_late_pct`` of the instances. Ranks on different hosts are compared on their hosts' clocks (each
    report's UTC session start): a skew below ``clock_uncertainty_us`` is reported as information, and
    the finding says so. Impact: the node's lateness summed over the instances where it is late (what
    every other rank waited for it); its share is of the late ranks' longest GPU-active span.
    """

    id = "COMM005"
    extra_type = LateNodeExtra
    name = "comm.late-node"
    verdict_kind = "communication"
    next_step = ("find what the late node's ranks share before the collectives (input pipeline, CPU and memory "
                 "pressure, other jobs, NIC placement)")
    scope = "run"
    category = "communication"
    requires = ("kernels",)
    thresholds = {
        "min_skew_us": Threshold(100.0, "us", "smallest lateness of a whole node counted in one collective",
                                 minimum=0.0, maximum=MAX_US),
        "min_late_pct": Threshold(50.0, "%", "report a node late in at least this share of the matched collectives",
                                  minimum=0.0, maximum=100.0),
        "clock_uncertainty_us": Threshold(1000.0, "us", "how far hosts' clocks may disagree (NTP); a skew "
                                          "below it is reported as information", minimum=0.0, maximum=MAX_US),
    }
    summary = "A whole node whose ranks all arrive late to the collectives"
    advice = (
        "Look at what the node does before the collectives (input pipeline, CPU and memory pressure, "
        "other jobs, NIC placement), since its ranks are slow alike.")

    def check(self, ctx: RuleContext) -> list[Finding]:
        run = ctx.run
        traces = [t for t in self.applicable(run) if _has_nccl(t)]
        if len(traces) < 2:
            return []
        offsets = run.offsets(traces)
        if offsets is None:
            raise Skip("a report lacks its session start time, so ranks cannot be aligned on one time base")
        windows = [None if t.window is None else (int(t.window[0]), int(t.window[1])) for t in traces]
        cols = instances(run.con, [f"{run.alias(t)}.kernels" for t in traces], offsets, windows)
        return late_node(cols, [t.rank for t in traces], [t.meta.get("host") for t in traces], offsets,
                         ctx.params, self.id, [report_span_ns(t) for t in traces])

    def check_facts(self, facts: RunFacts, params: Mapping[str, float]) -> list[Finding]:
        if len(facts.sources) < 2:
            return []
        cols = instances(facts.con, facts.sources, facts.offsets, facts.windows)
        return late_node(cols, facts.ranks, facts.hosts, facts.offsets, params, self.id, facts.spans)
