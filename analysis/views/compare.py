"""Comparing two runs (head − base) from plain data; the service's compare (API and page), `goodput diff`
and its gate all call ``compare``, so they show the same numbers.

When both runs have loops the comparison is per step: step time and what each step's GPU time was spent
on (``analysis.views.compare_samples``), kernels per launch with their launches per step
(``analysis.views.compare_kernels``), each tested for significance (``analysis.views.significance``); totals are
shown beside, never the basis of "changed" when the step counts differ. Without loops kernels are compared
per launch and the rest by totals. Findings are matched by rule and scope (``analysis.views.compare_findings``).

A run side is a ``RunFacts``: the analysis' report dicts (``analysis.api.analyze(...)["reports"]``, the
same dicts the service stores), each report's samples read from its DuckDB file (``run_facts``) and the
findings as dicts in ranking order. Nothing here reads a database other than a report's DuckDB file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

from analysis import fmt
from analysis.readers import ToolKind
from analysis.report_types import CollectiveSplit, FindingJson, ReportInfo, SampleSums

if TYPE_CHECKING:  # NumPy and the samples' reader load when a comparison runs, not with ``analysis.api``
    import numpy as np

    from analysis.views.compare_findings import MatchedFinding, UnpairedFinding
    from analysis.views.compare_kernels import KernelDiff, NoiseFloor
    from analysis.views.compare_samples import ReportSamples
    from analysis.views.significance import SampleComparison

BREAKDOWN_KEYS = ("span_ns", "compute_ns", "comm_exposed_ns", "memory_only_ns", "idle_ns", "goodput_pct")
SUM_KEYS = BREAKDOWN_KEYS[:-1]
# The floor on the effect size: a significant change of a median smaller than this share is not a change.
DEFAULT_NOISE_PCT = 5.0
# The step statistics compared per rank (from ``analysis.loops.iterations``; GPU time per step).
STEP_KEYS = ("count", "median_ns", "p10_ns", "p90_ns", "min_ns", "max_ns")
# A run's (or report's) breakdown KPIs by key (``BREAKDOWN_KEYS``; None where the analysis had none).
Totals = dict[str, int | float | None]


class Delta(TypedDict):
    """One number of both runs and its change (``delta``); a per-step KPI row adds the tested estimate
    (``_estimated``), kernel time per step where it comes from (``_inside_steps``), a collective row whether it
    changed."""

    base: Any
    head: Any
    delta: Any
    delta_pct: float | None
    median_delta_pct: NotRequired[float | None]
    estimator: NotRequired[str]
    p_value: NotRequired[float | None]
    changed: NotRequired[bool | None]
    source: NotRequired[str]


class Sources(TypedDict):
    """Where each run's step records came from (``ReportSamples.steps_source``)."""

    base: str | None
    head: str | None


class StepDiff(TypedDict):
    """Two reports' (or runs' pace setters') steps compared (``diff_steps``): their counts, where their records came
    from, and each per-step metric of ``analysis.views.compare_samples.STEP_METRICS`` tested."""

    count: Delta
    source: Sources
    step_time_ns: SampleComparison
    compute_ns: SampleComparison
    comm_exposed_ns: SampleComparison
    memory_only_ns: SampleComparison
    idle_ns: SampleComparison


class CollectivesDiff(TypedDict):
    """The runs' communication kernels compared (``diff_collectives``): instances, how they were tested, the waiting
    (for the last rank) and the transfer (after it) per instance and rank, each with whether it ``changed``, and
    where tested, the samples' comparison (per step, else per instance); ``said``: the outcome in words."""

    instances: Delta
    basis: str
    tested: bool
    wait_per_step_ns: NotRequired[SampleComparison]
    wait_per_instance_sample_ns: NotRequired[SampleComparison]
    wait_per_instance_ns: Delta
    transfer_per_step_ns: NotRequired[SampleComparison]
    transfer_per_instance_sample_ns: NotRequired[SampleComparison]
    transfer_per_instance_ns: Delta
    said: str


class RankDiff(TypedDict):
    """One rank (or report, paired by position) of both runs (``diff_ranks``)."""

    rank: Any
    report: Any
    base_file: str | None
    head_file: str | None
    breakdown: dict[str, Delta]
    steps: dict[str, Delta] | None
    per_step: StepDiff | None


class SideWindows(TypedDict):
    """Each run's reports' judged windows as [start_ns, end_ns] (None: the whole report)."""

    base: list[list[int] | None]
    head: list[list[int] | None]


class RunComparison(TypedDict):
    """Two runs compared, head − base (``compare``): what every view of a comparison shows (the service's page and
    API, ``goodput diff`` and its gate). ``kernels``, ``kernel_table`` and ``noise``: ``analysis.views.compare_kernels``;
    the findings' match: ``analysis.views.compare_findings``."""

    base: Any
    head: Any
    basis: Literal["per_step", "per_launch_and_totals"]
    notes: list[str]
    windows: SideWindows
    kpis: dict[str, Delta]
    breakdown: dict[str, Delta]
    step_time_ns: Delta
    steps: StepDiff | None
    noise: NoiseFloor
    kernels: list[KernelDiff]
    kernel_table: list[KernelDiff]
    matched_findings: list[MatchedFinding]
    new_findings: list[UnpairedFinding]
    resolved_findings: list[UnpairedFinding]
    ranks: list[RankDiff]
    collectives: CollectivesDiff | None


@dataclass(frozen=True)
class RunFacts:
    """One side of a comparison. ``id``: the run id or a label; ``totals``: the run's breakdown when the
    caller has it stored (else summed from ``reports`` by ``run_totals``)."""

    id: Any
    reports: list[ReportInfo] = field(default_factory=list)
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: list[FindingJson] = field(default_factory=list)
    totals: Totals | None = None
    # Per report (aligned with ``reports``): its samples, None where its file could not be read.
    samples: list[ReportSamples | None] = field(default_factory=list)
    # The run's collectives split into waiting and transfer (``analysis.run.waiting``), when it has one.
    collectives: CollectiveSplit | None = None


def run_facts(id: Any, reports: list[ReportInfo], findings: list[FindingJson],
              paths: Sequence[Path | None], totals: Totals | None = None,
              collectives: CollectiveSplit | None = None) -> RunFacts:
    """One run's facts, each report's samples read from its DuckDB file (``paths`` aligned with
    ``reports``; None or a missing file: no samples for that report)."""
    from analysis.views.compare_samples import ReportSamples, read_samples

    samples: list[ReportSamples | None] = []
    for report, path in zip(reports, paths, strict=True):
        if report.get("tool") not in (None, ToolKind.NSYS):
            samples.append(ReportSamples())     # an ncu report: no timeline to sample
        else:
            samples.append(read_samples(path, report) if path is not None and Path(path).is_file() else None)
    return RunFacts(id=id, reports=reports, findings=findings, totals=totals, samples=samples, collectives=collectives)


def breakdown_value(data: Mapping[str, Any], key: str) -> int | float | None:
    """A breakdown number of a report (or run) dict: from its ``breakdown``, else its top level."""
    raw = data.get("breakdown")
    bd: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    for source in (bd, data):
        value = source.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def report_breakdown(report: Mapping[str, Any]) -> dict[str, int | float | None]:
    """One report's breakdown KPIs (``None`` where the analysis had none)."""
    return {k: breakdown_value(report, k) for k in BREAKDOWN_KEYS}


def run_totals(reports: Sequence[Mapping[str, Any]]) -> Totals:
    """The run's KPIs: the ranks' times summed (span too: GPU time across ranks), goodput from the sums.

    The same arithmetic as the service's per-run summary row (``app.services.jobs.pipeline``).
    """
    out: Totals = {}
    for key in SUM_KEYS:
        values = [int(v) for v in (breakdown_value(r, key) for r in reports) if v is not None]
        out[key] = sum(values) if values else None
    out["goodput_pct"] = (round(100.0 * out["compute_ns"] / out["span_ns"], 3)
                          if out["span_ns"] and out["compute_ns"] is not None else None)
    return out


def delta(base: Any, head: Any) -> Delta:
    d = None if base is None or head is None else head - base
    pct = None if d is None or not base else round(100.0 * d / base, 3)
    return {"base": base, "head": head, "delta": d, "delta_pct": pct}


def _keys(reports: list[ReportInfo], by_rank: bool) -> list[tuple[str, Any]]:
    return [("rank", r.get("rank")) if by_rank else ("report", i) for i, r in enumerate(reports)]


def _has_ranks(reports: list[ReportInfo]) -> bool:
    ranks = [r.get("rank") for r in reports]
    return all(isinstance(x, int) for x in ranks) and len(set(ranks)) == len(ranks)


def _steps(report: Mapping[str, Any]) -> dict[str, int | float | None] | None:
    raw = report.get("iterations")
    it: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    return {k: it.get(k) for k in STEP_KEYS} if it.get("count") else None


def report_step_time(report: Mapping[str, Any]) -> float | None:
    """A report's step time as its run page shows it: the median length of the iterations in its window
    (the step anatomy's), else the loop's median over all its iterations."""
    it = report.get("iterations")
    if not isinstance(it, dict):
        return None
    ana = it.get("anatomy")
    value = ana.get("iteration_median_ns") if isinstance(ana, dict) else None
    if value is None and it.get("count"):
        value = it.get("median_ns")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def step_time(reports: Sequence[Mapping[str, Any]]) -> float | None:
    """The run's step time: the largest per-rank step time (the slowest rank sets the pace)."""
    values = [v for v in (report_step_time(r) for r in reports) if v is not None]
    return max(values) if values else None


def _pace_setter(samples: Sequence[ReportSamples | None]) -> ReportSamples | None:
    """The report whose steps set the run's pace: the largest median step time (ties: the first)."""
    import numpy as np

    best, best_median = None, None
    for s in samples:
        if s is None or not s.step_count:
            continue
        med = float(np.median(s.steps["step_time_ns"]))
        if best_median is None or med > best_median:
            best, best_median = s, med
    return best


def diff_steps(b: ReportSamples | None, h: ReportSamples | None, noise_pct: float) -> StepDiff | None:
    """Per-step metrics of two reports (or runs' pace setters) tested; None when either has no steps."""
    from analysis.views.significance import compare_samples

    if b is None or h is None or not b.step_count or not h.step_count:
        return None

    def tested(metric: str) -> SampleComparison:
        return compare_samples(b.steps[metric], h.steps[metric], noise_pct)

    # The metrics of ``STEP_METRICS``, in its order.
    return {"count": delta(b.step_count, h.step_count), "source": {"base": b.steps_source, "head": h.steps_source},
            "step_time_ns": tested("step_time_ns"), "compute_ns": tested("compute_ns"),
            "comm_exposed_ns": tested("comm_exposed_ns"), "memory_only_ns": tested("memory_only_ns"),
            "idle_ns": tested("idle_ns")}


def _sample_at(facts: RunFacts, i: int) -> ReportSamples | None:
    return facts.samples[i] if i < len(facts.samples) else None


def diff_ranks(base: RunFacts, head: RunFacts, noise_pct: float) -> list[RankDiff]:
    """Per rank: breakdown deltas, and step deltas when both have steps (``steps``: the loop's statistics;
    ``per_step``: the records tested). Reports pair by rank when every report of both runs has its own
    rank, else by position (one report each: those two)."""
    by_rank = _has_ranks(base.reports) and _has_ranks(head.reports)
    bmap = {k: i for i, k in enumerate(_keys(base.reports, by_rank))}
    hmap = {k: i for i, k in enumerate(_keys(head.reports, by_rank))}
    out: list[RankDiff] = []
    for key in sorted(set(bmap) | set(hmap), key=lambda k: k[1]):
        bi, hi = bmap.get(key), hmap.get(key)
        b = base.reports[bi] if bi is not None else None
        h = head.reports[hi] if hi is not None else None
        bb = report_breakdown(b) if b else dict.fromkeys(BREAKDOWN_KEYS)
        hb = report_breakdown(h) if h else dict.fromkeys(BREAKDOWN_KEYS)
        bs, hs = (_steps(b) if b else None), (_steps(h) if h else None)
        out.append({
            "rank": key[1] if key[0] == "rank" else None,
            "report": key[1] if key[0] == "report" else None,
            "base_file": b.get("file") if b else None, "head_file": h.get("file") if h else None,
            "breakdown": {k: delta(bb[k], hb[k]) for k in BREAKDOWN_KEYS},
            "steps": ({k: delta(bs[k], hs[k]) for k in STEP_KEYS} if bs and hs else None),
            "per_step": diff_steps(_sample_at(base, bi) if bi is not None else None,
                                   _sample_at(head, hi) if hi is not None else None, noise_pct),
        })
    return out


def _windows(reports: Sequence[Mapping[str, Any]]) -> list[list[int] | None]:
    """Each report's judged window as [start_ns, end_ns] (None: the whole report)."""
    from analysis.views.compare_samples import report_window

    return [None if (w := report_window(r)) is None else list(w) for r in reports]


def _window_ns(reports: Sequence[Mapping[str, Any]]) -> list[int | None]:
    from analysis.views.compare_samples import report_window

    return [None if (w := report_window(r)) is None else w[1] - w[0] for r in reports]


def notes(base: RunFacts, head: RunFacts, steps: StepDiff | None) -> list[str]:
    """Why totals would mislead, and what the comparison did instead."""
    out = []
    if steps is not None and steps["count"]["delta"]:
        out.append(f"The runs cover different numbers of steps ({fmt.count(steps['count']['base'])} and "
                   f"{fmt.count(steps['count']['head'])}): steps and kernels are compared per step and per launch; "
                   "totals are shown beside, not judged.")
    elif steps is None:
        out.append("No loop found in both runs: kernels are compared per launch, the rest by totals.")
    wb, wh = _window_ns(base.reports), _window_ns(head.reports)
    if len(wb) == len(wh) and wb != wh and None not in wb + wh:
        out.append(f"The runs' analysis windows differ in length ({fmt.duration(sum(x or 0 for x in wb))} and "
                   f"{fmt.duration(sum(x or 0 for x in wh))}).")
    for side, facts in (("base", base), ("head", head)):
        if any(s is None for s in facts.samples) or len(facts.samples) < len(facts.reports):
            out.append(f"Some report files of the {side} run could not be read: its kernels and steps are partial.")
    return out


def _median(stat: SampleComparison | None, side: Literal["base", "head"],
            key: Literal["median", "p90"] = "median") -> float | None:
    return None if stat is None else stat[side][key]


def kpis(bt: Totals, ht: Totals, steps: StepDiff | None,
         kernels: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
         per_step: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None) -> dict[str, Delta]:
    """The headline numbers every view shows: total kernel time (in the windows compared), steps compared,
    step time (median, p90), goodput, and exposed communication, idle and memory-only, as totals and (with
    steps) as medians per step. Kernel time per step is what lies inside the steps (never a window's total,
    which also holds partial steps, over its complete steps). A per-step row's change is one number: the
    tested estimate of the ratio (``delta_pct``, ``estimator``), the medians beside it."""
    kb, kh = (sum(int(v.sum()) for v in side.values()) for side in kernels)
    # No launch on either side (two ncu reports: no timeline): no kernel time to compare, never "0 -> 0".
    timed = bool(kernels[0]) or bool(kernels[1])
    step_time = steps["step_time_ns"] if steps else None
    out: dict[str, Delta] = {
        "kernel_time_ns": delta(kb, kh) if timed else delta(None, None),
        "steps": steps["count"] if steps else delta(None, None),
        "step_time_median_ns": delta(_median(step_time, "base"), _median(step_time, "head")),
        "step_time_p90_ns": delta(_median(step_time, "base", "p90"), _median(step_time, "head", "p90")),
        "goodput_pct": delta(bt.get("goodput_pct"), ht.get("goodput_pct")),
    }
    out["kernel_time_per_step_ns"] = _inside_steps(per_step)
    if step_time is not None:
        _estimated(out["step_time_median_ns"], step_time)
    for key, stat in (("comm_exposed_ns", steps["comm_exposed_ns"] if steps else None),
                      ("idle_ns", steps["idle_ns"] if steps else None),
                      ("memory_only_ns", steps["memory_only_ns"] if steps else None)):
        out[key] = delta(bt.get(key), ht.get(key))
        out[key.replace("_ns", "_per_step_ns")] = delta(_median(stat, "base"), _median(stat, "head"))
        if stat is not None:
            _estimated(out[key.replace("_ns", "_per_step_ns")], stat)
    return out


def _estimated(row: Delta, stat: SampleComparison) -> None:
    """A per-step KPI row takes the tested estimate as its one change in percent; the medians' ratio is kept
    apart (``median_delta_pct``), so a row never shows two changes side by side."""
    row["median_delta_pct"] = row["delta_pct"]
    row["delta_pct"] = stat["delta_pct"]
    row["estimator"] = "hodges_lehmann_ratio"
    row["p_value"], row["changed"] = stat["p_value"], stat["changed"]


def _inside_steps(per_step: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None) -> Delta:
    """Kernel time per step: the mean over the (report, step) samples of what lies inside the steps."""
    if not per_step or not per_step[0] or not per_step[1]:
        return delta(None, None)
    import numpy as np

    b, h = (np.sum(np.stack(list(side.values())), axis=0, dtype=np.float64) for side in per_step)
    return {**delta(round(float(b.mean()), 1), round(float(h.mean()), 1)), "source": "inside_steps"}


def compare(base: RunFacts, head: RunFacts, *, noise_pct: float = DEFAULT_NOISE_PCT) -> RunComparison:
    """The difference head − base. Kernel rows that did not change are counted, not listed (the
    per-launch table shows the kernels with the most time either way)."""
    from analysis.views.compare_findings import match_findings
    from analysis.views.compare_kernels import diff_kernels
    from analysis.views.compare_samples import (
        kernel_per_step,
        merge_kernel_samples,
        merge_per_step,
        on_device,
    )

    bt = base.totals if base.totals is not None else run_totals(base.reports)
    ht = head.totals if head.totals is not None else run_totals(head.reports)
    pb, ph = _pace_setter(base.samples), _pace_setter(head.samples)
    if pb is not None and ph is not None and pb.device is not None and ph.device is not None and pb.device != ph.device:
        # The loops were found on different GPUs: what a step spends its time on is compared on one GPU.
        ph = on_device(ph, pb.device) or ph
    steps = diff_steps(pb, ph, noise_pct)
    kb = merge_kernel_samples([s for s in base.samples if s is not None])
    kh = merge_kernel_samples([s for s in head.samples if s is not None])
    nb, nh = (steps["count"]["base"], steps["count"]["head"]) if steps else (0, 0)
    stepped = ([s for s in base.samples if s is not None and s.step_count],
               [s for s in head.samples if s is not None and s.step_count])
    psb, psh = (merge_per_step([kernel_per_step(s) for s in side]) if steps else {} for side in stepped)
    inside = tuple({n: int(v.sum()) for n, v in merge_per_step([kernel_per_step(s, counts=True) for s in side]).items()}
                   for side in stepped)
    changed, table, noise = diff_kernels(kb, kh, noise_pct, nb, nh, psb, psh, (inside[0], inside[1]))
    found = match_findings(base.findings, head.findings)
    return {
        "base": base.id,
        "head": head.id,
        "basis": "per_step" if steps else "per_launch_and_totals",
        "notes": notes(base, head, steps),
        "windows": {"base": _windows(base.reports), "head": _windows(head.reports)},
        "kpis": kpis(bt, ht, steps, (kb, kh), (psb, psh)),
        "breakdown": {k: delta(bt.get(k), ht.get(k)) for k in BREAKDOWN_KEYS},
        "step_time_ns": delta(step_time(base.reports), step_time(head.reports)),
        "steps": steps,
        "noise": noise,
        "kernels": changed,
        "kernel_table": table,
        "matched_findings": found["matched"],
        "new_findings": found["new"],
        "resolved_findings": found["resolved"],
        "ranks": diff_ranks(base, head, noise_pct),
        "collectives": diff_collectives(base.collectives, head.collectives, noise_pct),
    }


def _per_instance(c: CollectiveSplit) -> SampleSums | None:
    """The split's waiting and transfer per collective instance (summed over ranks), None where it kept none."""
    got = c.get("samples")
    inst = got.get("per_instance") if isinstance(got, dict) else None
    return inst if isinstance(inst, dict) and inst.get("wait_ns") else None


def _split_samples(c: CollectiveSplit) -> tuple[str, SampleSums] | None:
    """The samples a run's collectives split keeps (``analysis.run.waiting``): per step when it has steps,
    else per instance; each summed over ranks. None in a split stored before they were kept."""
    got = c.get("samples")
    step = got.get("per_step") if isinstance(got, dict) else None
    if isinstance(step, dict) and step.get("wait_ns"):
        return "per_step", step
    inst = _per_instance(c)
    return ("per_instance", inst) if inst else None


BASES = {"per_step": "per step (summed over the step's collectives and ranks), Mann-Whitney over steps",
         "per_instance": "per collective instance (summed over ranks), Mann-Whitney over instances"}


def diff_collectives(base: CollectiveSplit | None, head: CollectiveSplit | None,
                     noise_pct: float) -> CollectivesDiff | None:
    """Communication kernels: whether their waiting (for the last rank) or their transfer (after it) changed.
    Tested as the compute kernels are per step (``analysis.views.significance``: Mann-Whitney and the
    ``noise_pct`` floor on the Hodges-Lehmann ratio): over the runs' steps when both have them, else over their
    collective instances; the means per instance and rank shown beside. Splits stored without samples
    fall back to those means against the floor (``tested`` false). None unless both runs have the split."""
    if not base or not head or not base.get("per_rank") or not head.get("per_rank"):
        return None
    import numpy as np

    from analysis.views.significance import compare_samples

    def per(c: CollectiveSplit, ns: int | None) -> float | None:
        n = int(c.get("instances") or 0) * len(c["per_rank"])
        return round(int(ns or 0) / n, 1) if n else None

    sb, sh = _split_samples(base), _split_samples(head)
    unit = "per_step" if sb and sh and sb[0] == sh[0] == "per_step" else "per_instance"
    if sb and sh and unit == "per_instance":  # one side without steps: both per instance, when both have them
        ib, ih = _per_instance(base), _per_instance(head)
        sb, sh = (("per_instance", ib), ("per_instance", ih)) if ib and ih else (None, None)
    tested = bool(sb and sh)
    out: dict[str, object] = {"instances": delta(base.get("instances"), head.get("instances")),
                           "basis": BASES[unit] if tested else "mean per instance and rank, against the floor",
                           "tested": tested}
    said = []
    for key, name, bn, hn, bs, hs in (
            ("wait_ns", "waiting", base.get("wait_ns"), head.get("wait_ns"),
             sb[1]["wait_ns"] if sb else [], sh[1]["wait_ns"] if sh else []),
            ("transfer_ns", "transfer", base.get("transfer_ns"), head.get("transfer_ns"),
             sb[1]["transfer_ns"] if sb else [], sh[1]["transfer_ns"] if sh else [])):
        d = delta(per(base, bn), per(head, hn))
        if tested:
            st = compare_samples(np.asarray(bs, dtype=np.int64), np.asarray(hs, dtype=np.int64), noise_pct)
            out[key.replace("_ns", f"_{unit}_ns" if unit == "per_step" else "_per_instance_sample_ns")] = st
            moved, up = bool(st["changed"]), (st["delta_pct"] or 0) > 0
        else:
            moved = d["delta_pct"] is not None and abs(d["delta_pct"]) >= noise_pct
            up = bool(moved and d["delta"] > 0)
        d["changed"] = bool(moved)
        out[key.replace("_ns", "_per_instance_ns")] = d
        said.append(f"{name} {'grew' if moved and up else 'shrank' if moved else 'unchanged'}")
    out["said"] = ", ".join(said)
    return cast("CollectivesDiff", out)  # its sample keys are named after the unit tested
