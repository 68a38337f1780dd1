"""Profiled launches of an ncu report with their metrics, looked up by raw name or by section display name.

ncu exports the same quantity under its raw metric name (``--metrics``, ``--page raw``) or under the
display name of a section (``--section``/``--set``, long layout): ``Metric`` lists both spellings so a
rule reads either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict


def _sec(section: str | None) -> str:
    return (section or "").replace(" ", "").replace("_", "").lower()


@dataclass(frozen=True)
class Metric:
    """One quantity: raw metric names, and (section prefix, display name, scale) spellings, in preference order."""

    raw: tuple[str, ...] = ()
    display: tuple[tuple[str, str, float], ...] = ()

    def names(self) -> list[str]:
        return list(self.raw) + [name for _, name, _ in self.display]


class NcuRuleResult(TypedDict):
    """One of ncu's own rule results on a launch (its section, rule, type, message and estimated speedup)."""

    section: str | None
    rule: str | None
    type: str | None
    message: str | None
    speedup_type: str | None
    speedup_pct: float | None


@dataclass
class Launch:
    """One profiled kernel launch: identity, launch facts and every metric value (base units)."""

    kernel_id: int
    name: str
    short_name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    grid_size: int | None
    block_size: int | None
    duration_ns: float | None
    raw: dict[str, float | None] = field(default_factory=dict)
    display: dict[tuple[str, str], float | None] = field(default_factory=dict)
    rules: list[NcuRuleResult] = field(default_factory=list)
    cc: str | None = None                # compute capability as exported ("8.0")
    device_name: str | None = None
    device: int | None = None            # the GPU's index as ncu exported it
    memo: dict[str, Any] = field(default_factory=dict)  # derived per-launch data (e.g. the memory story)

    def get(self, metric: Metric) -> float | None:
        for name in metric.raw:
            value = self.raw.get(name)
            if value is not None:
                return value
        for section, name, scale in metric.display:
            for (sec, disp), value in self.display.items():
                if disp == name and sec.startswith(section) and value is not None:
                    return value * scale
        return None

    def matching(self, prefix: str, suffix: str) -> dict[str, float]:
        """Raw metrics named ``prefix<part>suffix`` with a value, keyed by ``part``."""
        return {n[len(prefix):len(n) - len(suffix)]: v for n, v in self.raw.items()
                if v is not None and n.startswith(prefix) and n.endswith(suffix) and len(n) > len(prefix) + len(suffix)}

    @property
    def group_key(self) -> tuple:
        """Launches of the same kernel with the same configuration are one kernel for findings."""
        return (self.name, self.grid or self.grid_size, self.block or self.block_size)


DURATION = Metric(("gpu__time_duration.sum", "gpu__time_duration"), (("gpuspeedoflight", "Duration", 1.0),))
CYCLES = Metric(("sm__cycles_elapsed.avg", "sm__cycles_elapsed.max"))
CYCLES_PER_S = Metric(("sm__cycles_elapsed.avg.per_second",))


def load_launches(trace: Any) -> list[Launch]:
    """Every profiled launch of an ncu report with its metrics and rule results (read once per open trace)."""
    cached = getattr(trace, "_ncu_launches", None)
    if cached is None:
        cached = _read_launches(trace)
        # Seven rules read the same report; the trace is immutable while open, so keep the parse on it.
        trace._ncu_launches = cached
    return cached


def _read_launches(trace: Any) -> list[Launch]:
    launches: dict[int, Launch] = {}
    report: dict[str, Any] = {}  # shared by the report's launches (e.g. which metrics it exports at all)
    for row in trace.sql(
        "SELECT kernel_id, name, short_name, grid_x, grid_y, grid_z, block_x, block_y, block_z, grid_size, "
        "block_size, duration_ns, cc, device_name, device FROM ncu_kernels ORDER BY kernel_id"
    ):
        kid, name, short, gx, gy, gz, bx, by, bz, gs, bs, dur, cc, device_name, device = row
        grid = (gx, gy, gz) if None not in (gx, gy, gz) else None
        block = (bx, by, bz) if None not in (bx, by, bz) else None
        launches[kid] = Launch(kid, name or "", short or "", grid, block, gs, bs, dur, cc=cc, device_name=device_name,
                               device=device, memo={"report": report})
    for kid, section, metric, value in trace.sql("SELECT kernel_id, section, metric, value FROM ncu_metrics"):
        launch = launches.get(kid)
        if launch is None:
            continue
        # Raw names (memory_l2_theoretical_sectors_global has no "__") never collide with display names.
        launch.raw.setdefault(metric, value)
        launch.display.setdefault((_sec(section), metric), value)
    for kid, section, rule, typ, message, stype, speedup in trace.sql(
        "SELECT kernel_id, section, rule, type, message, speedup_type, speedup_pct FROM ncu_rule_results"
    ):
        if kid in launches:
            launches[kid].rules.append(NcuRuleResult(section=section, rule=rule, type=typ, message=message,
                                                     speedup_type=stype, speedup_pct=speedup))
    for launch in launches.values():
        if launch.duration_ns is None:
            launch.duration_ns = launch.get(DURATION)
        if launch.duration_ns is None:
            # Older `--metrics` exports without gpu__time_duration: elapsed SM cycles / SM clock.
            cycles, rate = launch.get(CYCLES), launch.get(CYCLES_PER_S)
            if cycles is not None and rate:
                launch.duration_ns = cycles / rate * 1e9
        if launch.duration_ns is not None and not launch.duration_ns >= 0:
            launch.duration_ns = None  # negative: not a time we can weigh a speedup with
    report["launches"] = list(launches.values())
    return report["launches"]


# Speed-of-light and scheduler quantities several rules share.
SM_PCT = Metric(("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
                (("gpuspeedoflight", "Compute (SM) Throughput", 1.0), ("gpuspeedoflight", "SM [%]", 1.0)))
MEM_PCT = Metric(("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
                 (("gpuspeedoflight", "Memory Throughput", 1.0), ("gpuspeedoflight", "Memory [%]", 1.0)))
ISSUE_ACTIVE = Metric(("smsp__issue_active.avg.per_cycle_active",),
                      (("schedulerstatistics", "One or More Eligible", 0.01),))


def issue_slot_bound(launch: Launch) -> float | None:
    """ncu's IssueSlotUtilization speedup (fraction): 1 - issue activity, capped by the SOL headroom.

    ncu caps its warp-stall and occupancy estimates with it (the "global" speedup).
    """
    issue = launch.get(ISSUE_ACTIVE)
    if issue is None:
        return None
    bound = 1.0 - issue
    sm, mem = launch.get(SM_PCT), launch.get(MEM_PCT)
    if sm is not None and mem is not None:
        bound = min(bound, 1.0 - max(sm, mem) / 100.0)
    return max(0.0, bound)
