"""The report's loops as the JSON shows them (``iterations.loops``), and which loop each finding judges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from analysis.loops.phases import Loop, Phase
from analysis.readers import ToolKind
from analysis.report_types import ReportInfo
from analysis.result_parts import LoopSpan


def loop_list(loop: Loop) -> list[LoopSpan]:
    """Every loop of the report in time order: ``{index, main, source, count, median_ns, p10_ns, p90_ns,
    p99_ns, signature, start_ns, end_ns, gpu_ns, trend_pct}``; iteration times are start to next start
    (the last one to its own end). ``trend_pct``: the change of the iteration time from the loop's first
    fifth to its last, as a share of the first (work that shrinks or grows step by step is one loop with
    a trend); None under 10 iterations. ``main``: the loop with the most GPU time, whose figures are the
    top-level ``iterations`` fields."""
    out = []
    for i, x in enumerate(loop.all):
        d = x.durations.astype(np.float64)
        q = np.percentile(d, [10, 50, 90, 99])
        k = len(d) // 5
        trend = (round(100.0 * (float(np.median(d[-k:])) - float(np.median(d[:k]))) / float(np.median(d[:k])), 3)
                 if len(d) >= 10 and float(np.median(d[:k])) > 0 else None)
        start, end = x.span
        out.append(LoopSpan(index=i, main=x is loop, source=x.source, count=len(x), median_ns=float(q[1]),
                            p10_ns=float(q[0]), p90_ns=float(q[2]), p99_ns=float(q[3]), signature=tuple(x.signature),
                            start_ns=start, end_ns=end, gpu_ns=int(x.gpu_ns), trend_pct=trend))
    return out


def loops_holding(spans: Sequence[tuple[int, int]], info: ReportInfo) -> tuple[int, ...] | None:
    """On a report with several loops, the loops a finding's evidence (``spans``) lies in: their indexes in
    ``iterations.loops``, empty when it lies outside every loop (a finding's ``loops``); None with fewer loops."""
    loops = (info.get("iterations") or {}).get("loops") or []
    if len(loops) < 2:
        return None
    return tuple(sorted({lp["index"] for lp in loops for a, b in spans if a < lp["end_ns"] and b > lp["start_ns"]}))


def run_phase(results: list[Any], spec: str) -> str:
    """The phase a run-level finding judges: the one every nsys report's window is (``work`` when no rank
    has a loop, so a cross-rank finding never names a ``steady`` phase no rank has), else the window spec."""
    names = {str((r.info.get("window") or {}).get("phase")) for r in results if r.tool == ToolKind.NSYS}
    return names.pop() if len(names) == 1 and "None" not in names else spec


def program_shape(loop: Loop, phases: list[Phase]) -> str:
    """What the program is, for the verdict: ``loop`` (one loop), ``loops`` (several one after the other),
    ``one_shot`` (GPU work without a loop: start-up / work / teardown) or ``no_gpu`` (no GPU work recorded);
    whether a loop is host-paced is ``iterations.anatomy.kind``."""
    if len(loop):
        return "loops" if len(loop.all) > 1 else "loop"
    return "one_shot" if any(p.name == "work" for p in phases) else "no_gpu"
