"""Drawing data for the run page's ncu memory charts and roofline, from the stored ``reports[].kernels`` numbers.

Geometry is computed here and drawn as inline SVG by ``_ncu_memory.html``: no script, no external asset, and
every string (kernel names) goes through Jinja's autoescaping.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analysis.api import KernelCause, NcuKernel, ToolKind, fmt
from app.services.pages.web_run import RunView

CHARTS = 20          # kernels charted per run page (most nsys time, else profiled time, first)
BOX_W, BOX_H = 120, 64
# Level boxes: (key, x, y); the kernel box feeds L1/TEX, L1/TEX feeds L2, L2 feeds the memories.
# The 64-pixel gaps hold each link's two label lines (bytes above the line, throughput below).
LAYOUT = {"kernel": (8, 20), "l1": (192, 20), "l2": (376, 20), "dram": (560, 20), "sysmem": (560, 120),
          "peer": (376, 120)}
LINKS = (("kernel", "l1"), ("l1", "l2"), ("l2", "dram"), ("l2", "sysmem"), ("l2", "peer"))
PLOT_W, PLOT_H, PAD_L, PAD_B, PAD_T, PAD_R = 680, 320, 72, 40, 16, 16


def share_color(pct: float | None) -> str:
    """Box fill by share of peak: pale green (idle) through yellow (half) to red (at peak); grey when unknown."""
    if pct is None:
        return "#eeeeee"
    t = min(max(pct / 100.0, 0.0), 1.0)
    stops = ((0.0, (0xe8, 0xf5, 0xe9)), (0.5, (0xff, 0xe0, 0x82)), (1.0, (0xef, 0x6c, 0x5a)))
    for (t0, c0), (t1, c1) in zip(stops, stops[1:], strict=False):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(c0, c1, strict=True))
    return "#ef6c5a"


def si(value: float | None, unit: str) -> str:
    """Three significant digits with a decimal prefix ("196 GB/s", "1.23 TFLOP/s"), as everywhere on the pages."""
    return fmt.si(value, unit)


def memory_chart(memory: Mapping[str, Any]) -> dict[str, Any]:
    """Boxes and links of one kernel's memory chart."""
    by = {lv["name"]: lv for lv in memory.get("levels") or []}
    boxes = [{"key": "kernel", "x": LAYOUT["kernel"][0], "y": LAYOUT["kernel"][1], "fill": "#e3ecfa",
              "lines": ["Kernel", memory.get("bound", {}).get("kind", "unknown") + "-bound"]}]
    for key, lv in by.items():
        if key not in LAYOUT:
            continue
        lines = [lv["label"]]
        if lv.get("pct_of_peak") is not None:
            lines.append(f"{fmt.pct(lv['pct_of_peak'])} of peak")
        if lv.get("hit_rate_pct") is not None:
            lines.append(f"hit rate {fmt.pct(lv['hit_rate_pct'])}")
        x, y = LAYOUT[key]
        boxes.append({"key": key, "x": x, "y": y, "fill": share_color(lv.get("pct_of_peak")), "lines": lines})
    links = []
    present = {b["key"] for b in boxes}
    for a, b in LINKS:
        if a in present and b in present:
            lv = by[b]
            (ax, ay), (bx, by_) = LAYOUT[a], LAYOUT[b]
            x1: float
            x2: float
            x1, y1 = ax + BOX_W, ay + BOX_H / 2
            x2, y2 = (bx, by_ + BOX_H / 2) if by_ == ay else (bx + BOX_W / 2, by_)
            if by_ != ay:
                x1, y1 = ax + BOX_W / 2 + (bx - ax) / 2, ay + BOX_H
                x2 = x1 if bx == ax else bx + BOX_W / 2
            vertical = x1 == x2
            links.append({"x1": x1, "y1": y1, "x2": x2, "y2": y2, "mx": x1 + 4 if vertical else (x1 + x2) / 2,
                          "my": (y1 + y2) / 2 if vertical else y1, "anchor": "start" if vertical else "middle",
                          "top": si(lv.get("bytes"), "B"), "bottom": si(lv.get("throughput_bps"), "B/s")})
    height = 196 if any(k in present for k in ("sysmem", "peer")) else 100
    return {"boxes": boxes, "links": links, "width": 688, "height": height, "box_w": BOX_W, "box_h": BOX_H}


@dataclass
class KernelGroup:
    """The profiled launches of one kernel configuration (name, grid, block) in one report; its longest launch
    (``kernel``) stands for the group, and its memory story is the group's chart."""

    report: str
    report_id: int
    config: tuple[str, tuple[int, ...], tuple[int, ...]]
    kernel: NcuKernel
    nsys_ns: int | None                 # the kernel's time in the run's nsys reports (None: not linked)
    launches: int = 0
    profiled_ns: float | None = 0.0     # None: no launch's duration is known

    @property
    def name(self) -> str:
        return self.kernel.name or ""

    @property
    def short_name(self) -> str:
        return self.kernel.short_name or ""

    @property
    def weight_ns(self) -> float | None:
        return self.nsys_ns if self.nsys_ns is not None else self.profiled_ns

    @property
    def saving_ns(self) -> int | None:
        return self.kernel.estimated_saving_ns

    @property
    def causes(self) -> tuple[KernelCause, ...]:
        return self.kernel.causes

    @property
    def memory(self) -> Mapping[str, Any]:
        return self.kernel.memory

    @property
    def duration_ns(self) -> float | None:
        return self.kernel.duration_ns

    @property
    def achieved_flops(self) -> float | None:
        return (self.memory.get("roofline") or {}).get("achieved_flops")

    @property
    def chart(self) -> dict[str, Any]:
        return memory_chart(self.memory)


def _groups(view: RunView) -> list[KernelGroup]:
    """Profiled launches grouped per kernel configuration and report; the longest launch stands for the group.
    From the read store's ``StoredKernel``s: the stored kernels carry the configuration's ``launches`` and
    ``profiled_ns`` beside the typed ``NcuKernel``."""
    out: dict[tuple[int, str, tuple[int, ...], tuple[int, ...]], KernelGroup] = {}
    for report in view.reports:
        entity = view.results.reports.get(report.id) if report.kind == ToolKind.NCU else None
        for stored in () if entity is None else entity.kernels:
            k = stored.kernel
            key = (report.id, k.name, k.grid or (), k.block or ())
            g = out.setdefault(key, KernelGroup(report.name, report.id, key[1:], k, k.nsys_total_ns))
            # Stored summaries keep one launch per configuration with its count and time (ncu_summary).
            g.launches += stored.launches or 1
            g.profiled_ns = (g.profiled_ns or 0.0) + ((k.duration_ns if stored.profiled_ns is None
                                                       else stored.profiled_ns) or 0.0)
            if (k.duration_ns or 0) > (g.kernel.duration_ns or 0):
                g.kernel = k
    groups = list(out.values())
    for g in groups:
        if g.kernel.duration_ns is None:  # the longest launch has none: no launch's time is known
            g.profiled_ns = None
    # Kernels by what their findings could save, then by time.
    return sorted(groups, key=lambda g: (-(g.saving_ns or 0), -(g.weight_ns or 0)))


def roofline_plot(groups: list[KernelGroup]) -> dict[str, Any] | None:
    """Log-log roofline of the run's kernels: x = FLOP per DRAM byte, y = FLOP/s, dot area ~ time."""
    points, bandwidths = [], []
    peaks: dict[str, float] = {}  # per precision: the highest compute peak of any kernel's device
    for g in groups:
        r = g.memory.get("roofline") or {}
        ai, fl = r.get("intensity_dram"), r.get("achieved_flops")
        for prec, peak in (r.get("peaks") or {}).items():
            peaks[prec] = max(peaks.get(prec, 0.0), peak["value"])
        for lv in g.memory.get("levels") or []:
            if lv["name"] == "dram" and lv.get("peak_bps"):
                bandwidths.append(lv["peak_bps"])
        if ai and fl and ai > 0 and fl > 0:
            points.append((ai, fl, g))
    if not points:
        return None
    # The roof each kernel was judged against (a memory level's bandwidth x its intensity there, or a compute
    # peak): drawn over its dot even when the device's peaks are unknown and no roof line can be drawn.
    attained = {id(g): ((g.memory.get("roofline") or {}).get("attainable_flops"),
                        (g.memory.get("roofline") or {}).get("roof")) for _, _, g in points}
    bw = sorted(bandwidths)[len(bandwidths) // 2] if bandwidths else None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points] + list(peaks.values()) + [a for a, _ in attained.values() if a and a > 0]
    x0, x1 = 10 ** math.floor(math.log10(min(xs) / 2)), 10 ** math.ceil(math.log10(max(xs) * 2))
    y0, y1 = 10 ** math.floor(math.log10(min(p[1] for p in points) / 2)), 10 ** math.ceil(math.log10(max(ys) * 2))
    if bw:
        x1 = max(x1, 10 ** math.ceil(math.log10(max(peaks.values(), default=0) / bw * 2 or 1)))
    w, h = PLOT_W - PAD_L - PAD_R, PLOT_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + w * (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0))

    def py(y: float) -> float:
        return PAD_T + h * (1 - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)))

    heaviest = max((g.weight_ns or 0) for _, _, g in points) or 1.0
    dots = [{"cx": px(ai), "cy": py(fl), "r": 4 + 14 * math.sqrt((g.weight_ns or 0) / heaviest),
             "name": g.name, "short_name": g.short_name or g.name,
             "text": f"{si(fl, 'FLOP/s')} at {fmt.sig3(ai)} FLOP/B · {fmt.duration(g.weight_ns or 0)}"}
            for ai, fl, g in points]
    marks = []
    for ai, fl, g in points:
        att, roof = attained[id(g)]
        if att and att > 0 and roof:
            label = f"{str(roof).upper() if len(str(roof)) <= 4 else roof} roof {si(att, 'FLOP/s')}"
            marks.append({"x": px(ai), "y": py(att), "y_dot": py(fl), "label": label,
                          "anchor": "end" if px(ai) > PAD_L + w * 0.7 else "start"})
    roofs = []
    for prec, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        if y0 < peak < y1:
            start = px(max(x0, peak / bw)) if bw else PAD_L
            roofs.append({"x1": start, "y1": py(peak), "x2": PAD_L + w, "y2": py(peak),
                          "label": f"{prec} {si(peak, 'FLOP/s')}"})
    if bw:
        xa, xb = max(x0, y0 / bw), min(x1, y1 / bw, max(peaks.values(), default=y1) / bw)
        if xb > xa:
            roofs.append({"x1": px(xa), "y1": py(xa * bw), "x2": px(xb), "y2": py(xb * bw),
                          "label": f"DRAM {si(bw, 'B/s')}"})
    ticks_x = [{"x": px(10.0 ** e), "label": fmt.exact(10.0 ** e)} for e in range(round(math.log10(x0)), round(math.log10(x1)) + 1)]
    ticks_y = [{"y": py(10.0 ** e), "label": re.sub(r"\.0+(?= |$)", "", si(10.0 ** e, "")).strip()} for e in range(round(math.log10(y0)), round(math.log10(y1)) + 1)]
    return {"dots": dots, "roofs": roofs, "marks": marks, "compute_unknown": not peaks, "ticks_x": ticks_x, "ticks_y": ticks_y, "width": PLOT_W, "height": PLOT_H,
            "left": PAD_L, "bottom": PLOT_H - PAD_B, "right": PLOT_W - PAD_R, "top": PAD_T}


def memory_view(view: RunView) -> dict[str, Any] | None:
    """Charts of the run's costliest profiled kernels (each group draws its ``chart``) and the roofline of all, or
    None without ncu kernels."""
    groups = _groups(view)
    if not groups:
        return None
    return {"charts": groups[:CHARTS], "more": max(0, len(groups) - CHARTS), "roofline": roofline_plot(groups)}


@dataclass(frozen=True)
class KernelPair:
    """The same kernel configuration in two runs: its costliest group in each."""

    before: KernelGroup
    after: KernelGroup

    @property
    def name(self) -> str:
        return self.after.name

    @property
    def short_name(self) -> str:
        return self.after.short_name or self.after.name


def memory_pairs(base: RunView, head: RunView, limit: int = 10) -> list[KernelPair]:
    """The same kernel (name, grid, block) in two runs: its chart before and after, costliest (after) first."""
    before: dict[tuple, KernelGroup] = {}
    for g in _groups(base):
        before.setdefault(g.config, g)  # groups are sorted by time: the first of a config is its costliest
    pairs = []
    seen: set[tuple] = set()
    for g in _groups(head):
        old = before.get(g.config)
        if old is None or g.config in seen:
            continue
        seen.add(g.config)
        pairs.append(KernelPair(old, g))
        if len(pairs) >= limit:
            break
    return pairs
