"""Time at stake for an ncu finding: ncu's speedup applied to the kernel's nsys GPU time when the run has it.

A profiled kernel links to the run's nsys kernels only when they are the same kernel: the same demangled
name and, when ncu knows the launch's grid and block, the same grid and block (``name+grid+block``). A
short name is never enough on its own: two instantiations of one template share it. Where both reports
name the GPU, only that GPU's launches count. Only when ncu exported
base names (its kernel name is the short name, no signature) does the short name plus the exact grid and
block link, and only when a single nsys kernel has them (``short_name+grid+block``). Anything else is no
link: the finding keeps the profiled time. ``impact_ns`` = linked nsys GPU time x speedup fraction, as a
share of the nsys reports' GPU-active span; unlinked: sum over launches of duration x speedup, as a share
of all profiled time in the ncu report.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from analysis.model.ncu_metrics import Launch
from analysis.readers import ToolKind

logger = logging.getLogger(__name__)


def nsys_span_ns(trace: Any) -> int | None:
    """GPU-active span of an nsys report: the summary's ``span_ns`` when it provides one, else first to last op."""
    try:
        from analysis.diagnosis.summary import report_info, report_span_ns

        # The summary's span alone: its whole report object (counts, top kernels, system metrics) is
        # not needed here, and cost a fifth of a small export's analysis.
        span = report_span_ns(trace) if trace.tool == "nsys" else report_info(trace).get("span_ns")
        if span:
            return int(span)
    except Exception:  # the summary is another module's; fall back to our own query below
        logger.debug("report_info unavailable for span; computing it", exc_info=True)
    tables = trace.tables
    parts = [t for t in ("kernels", "memcpy", "memset") if t in tables]
    if not parts:
        return None
    sql = " UNION ALL ".join(f"SELECT min(start_ns) AS s, max(end_ns) AS e FROM {t}" for t in parts)  # noqa: S608
    lo, hi = trace.con.execute(f"SELECT min(s), max(e) FROM ({sql})").fetchone()  # noqa: S608
    return None if lo is None or hi is None else int(hi - lo)


@dataclass
class NsysKernels:
    """Per-configuration GPU time of one nsys report's kernels."""

    label: str
    span_ns: int | None
    rows: list[tuple]  # (name, short_name, grid, block, count, total_ns, device)


def nsys_kernels(trace: Any) -> NsysKernels | None:
    """Per-configuration GPU time of an nsys report's kernels (None without kernels)."""
    if "kernels" not in trace.tables:
        return None
    rows = [
        (name, short, (gx, gy, gz), (bx, by, bz), n, total, device)
        for name, short, gx, gy, gz, bx, by, bz, n, total, device in trace.sql(
            "SELECT name, short_name, grid_x, grid_y, grid_z, block_x, block_y, block_z, count(*), "
            "sum(end_ns - start_ns), device FROM kernels GROUP BY ALL"
        )
    ]
    return NsysKernels(trace.label, nsys_span_ns(trace), rows) if rows else None


class NsysKernelsJson(TypedDict):
    """``NsysKernels`` as saved with a report's facts (``kernels_to_json``): rows as lists."""

    label: str
    span_ns: int | None
    rows: list[list[Any]]


def kernels_to_json(k: NsysKernels) -> NsysKernelsJson:
    return {"label": k.label, "span_ns": k.span_ns, "rows": [[a, b, list(g), list(bl), int(n), None if t is None
                                                              else int(t), *rest] for a, b, g, bl, n, t, *rest in k.rows]}


def kernels_from_json(d: Mapping[str, Any]) -> NsysKernels:
    """The inverse of ``kernels_to_json`` (grid and block back to tuples, as ``Launch`` has them)."""
    # Facts stored before the device was kept have six columns: device unknown.
    return NsysKernels(d["label"], d["span_ns"], [(a, b, tuple(g), tuple(bl), n, t, *(rest or [None]))
                                                  for a, b, g, bl, n, t, *rest in d["rows"]])


@dataclass(frozen=True)
class Link:
    """How a profiled kernel maps onto nsys time."""

    total_ns: int
    launches: int
    span_ns: int
    match: str          # 'name' | 'short_name', with '+grid+block' when narrowed
    reports: tuple[str, ...]


class Linker:
    """Matches ncu kernels to the nsys kernels of the same run (loaded once per rule run)."""

    def __init__(self, run: Any) -> None:
        # A run analyzed report by report (analysis.run.runner) carries the nsys reports' kernel groups as
        # facts instead of the reports themselves.
        given = getattr(run, "nsys_kernels", None)
        if given is not None:
            self.reports = list(given)
            return
        self.reports = []
        for trace in run.of_tool(ToolKind.NSYS):
            kernels = nsys_kernels(trace)
            if kernels is not None:
                self.reports.append(kernels)

    def link(self, launch: Launch) -> Link | None:
        total = count = span = 0
        how, labels = "", []
        for rep in self.reports:
            hits, kind = match_rows(rep.rows, launch)
            if not hits:
                continue
            total += sum(int(r[5] or 0) for r in hits)
            count += sum(int(r[4]) for r in hits)
            span += rep.span_ns or 0
            how = how or kind
            labels.append(rep.label)
        if not labels or span <= 0:
            return None
        return Link(total, count, span, how, tuple(labels))


def match_rows(rows: list[tuple], launch: Launch) -> tuple[list[tuple], str]:
    """The nsys kernel groups that are this profiled kernel, and how they were matched ([] when none are)."""
    dims = launch.grid is not None and launch.block is not None

    def same_shape(r: tuple) -> bool:
        return tuple(r[2]) == tuple(launch.grid or ()) and tuple(r[3]) == tuple(launch.block or ())

    # The same GPU where both reports say which. Not the process: ncu replays kernels in a session of its own,
    # so its process id never equals the nsys one even for the very same program.
    if launch.device is not None and any(len(r) > 6 and r[6] is not None for r in rows):
        rows = [r for r in rows if len(r) <= 6 or r[6] is None or r[6] == launch.device]
    exact = [r for r in rows if r[0] == launch.name]
    if exact:
        if not dims:  # ncu did not export the launch's shape: the demangled name is all there is to match
            return exact, "name"
        return [r for r in exact if same_shape(r)], "name+grid+block"
    base_only = bool(launch.short_name) and launch.name.strip() == launch.short_name
    if not (base_only and dims):
        return [], ""
    hits = [r for r in rows if r[1] == launch.short_name and same_shape(r)]
    if len({r[0] for r in hits}) != 1:  # several instantiations fit: which one ncu measured is unknown
        return [], ""
    return hits, "short_name+grid+block"


def weighted_speedup(pairs: list[tuple[Launch, float]]) -> float:
    """Duration-weighted mean speedup fraction of a kernel's launches (plain mean when durations are unknown)."""
    if not pairs:
        return 0.0
    if all(launch.duration_ns for launch, _ in pairs):
        total = sum(launch.duration_ns or 0.0 for launch, _ in pairs)  # `or`: for the type checker (all set)
        return sum((launch.duration_ns or 0.0) * s for launch, s in pairs) / total
    return sum(s for _, s in pairs) / len(pairs)


def impact(link: Link | None, pairs: list[tuple[Launch, float]], profiled_total_ns: float | None,
           speedup: float) -> tuple[int, float | None]:
    """(impact_ns, impact_pct) for one finding; see the module docstring."""
    if link is not None:
        ns = link.total_ns * speedup
        return int(round(ns)), 100.0 * ns / link.span_ns
    if not all(launch.duration_ns is None or launch.duration_ns < 2**62 for launch, _ in pairs):
        return 0, None  # durations past 146 years come from a hostile export, not from a kernel
    if not all(launch.duration_ns for launch, _ in pairs):
        return 0, None
    ns = sum((launch.duration_ns or 0.0) * s for launch, s in pairs)  # every duration set (checked above)
    pct = 100.0 * ns / profiled_total_ns if profiled_total_ns else None
    # A hostile export can give durations far below a nanosecond (5e-324): their ratio is no share of anything.
    return int(round(ns)), pct if pct is not None and math.isfinite(pct) else None
