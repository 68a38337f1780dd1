"""The memory story of one profiled kernel: bytes per level, hit rates, sectors per request, bound, roofline.

Every number is computed from the launch's own metrics (see ``analysis.diagnosis.ncu.memory_metrics`` for the names)
and the peaks of ``analysis.diagnosis.ncu.hardware``; a quantity whose metrics the export lacks is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from analysis import fmt
from analysis.diagnosis.ncu import hardware as hwt
from analysis.diagnosis.ncu import memory_metrics as mm
from analysis.diagnosis.ncu.access_width import ideal_per_request
from analysis.model.ncu_metrics import ISSUE_ACTIVE, MEM_PCT, SM_PCT, Launch, Metric

CYCLES_PER_ISSUE = Metric(("smsp__average_warp_latency_per_inst_issued.ratio",),
                          (("warpstatestatistics", "Warp Cycles Per Issued Instruction", 1.0),))
# Decision thresholds (ncu's SOLBottleneck: under 60% of peak = latency issue; CPIStall: a stall reason over
# 30% of the cycles between issued instructions matters). The rules expose them as thresholds.
DEFAULTS = {"bandwidth_pct": 60.0, "min_stall_share": 0.3}
WARP_REQUEST_BYTES = 128.0
# When every metric value of a report is 0 or within these magnitudes, no product or quotient the story forms
# (at most a few factors, constants under 1e16) can leave the float range: the non-finite check is skipped.
MODERATE = (1e-30, 1e30)  # a coalesced warp request of 4-byte accesses when sectors per request are unknown


def _present(launch: Launch) -> dict[Any, Any]:
    """Per report: each quantity reduced to the spellings the report exports (None when it has none).

    The plan is keyed by ``id(metric)`` (its reduced Metric), ``("level", key)`` (whether a level is exported)
    and the names ``raw``, ``display``, ``moderate``.

    Launches of a report export the same metrics, so most lookups of absent ones stop here.
    """
    report = launch.memo.get("report")
    if report is None:  # a launch built outside load_launches
        report = launch.memo["report"] = {"launches": [launch]}
    plan = report.get("memory_plan")
    if plan is None:
        raw: set[str] = set()
        display: set[str] = set()
        moderate = True
        for other in report["launches"]:
            raw.update(other.raw)
            display.update(name for _, name in other.display)
            if moderate:
                moderate = all(v is None or v == 0 or MODERATE[0] <= abs(v) <= MODERATE[1]
                               for values in (other.raw.values(), other.display.values()) for v in values)
        plan = report["memory_plan"] = {"raw": raw, "display": display, "moderate": moderate}
    launch.memo["plan"] = plan
    return plan


def _get(launch: Launch, metric: Metric) -> float | None:
    """``launch.get(metric)``, skipping spellings the report never exports and indexing display names once."""
    plan = launch.memo.get("plan") or _present(launch)
    entry = plan.get(id(metric))
    if entry is None or entry[0] is not metric:
        raw = tuple(n for n in metric.raw if n in plan["raw"])
        display = tuple(d for d in metric.display if d[1] in plan["display"])
        entry = plan[id(metric)] = (metric, Metric(raw, display) if raw or display else None)
    compiled = entry[1]
    if compiled is None:
        return None
    for name in compiled.raw:
        value = launch.raw.get(name)
        if value is not None:
            return value
    if not compiled.display:
        return None
    index = launch.memo.get("display_index")
    if index is None:
        index = {}
        for (sec, disp), value in launch.display.items():
            if value is not None:
                index.setdefault(disp, []).append((sec, value))
        launch.memo["display_index"] = index
    for section, name, scale in compiled.display:
        for sec, value in index.get(name, ()):
            if sec.startswith(section):
                return value * scale
    return None


def _has_level(launch: Launch, spec: mm.LevelSpec) -> bool:
    """Whether the report exports any metric of a level (decided once per report)."""
    plan = _present(launch)
    key = ("level", spec.key)
    if key not in plan:
        metrics = [spec.bytes, spec.sectors, spec.pct, spec.rate, spec.peak, spec.clock,
                   *(m for _, m, _ in spec.parts), *([spec.hit] if spec.hit else [])]
        plan[key] = any(n in plan["raw"] for m in metrics for n in m.raw) or \
            any(d[1] in plan["display"] for m in metrics for d in m.display)
    return plan[key]


def _hardware(launch: Launch, cc: str | None, device_name: str | None) -> hwt.Hardware:
    hw = hwt.Hardware()
    major, minor = _get(launch, mm.CC_MAJOR), _get(launch, mm.CC_MINOR)
    if not cc and major is not None and minor is not None and 0 <= major < 100 and 0 <= minor < 100:
        cc = f"{int(major)}.{int(minor)}"
    product = hwt.product_for(device_name)
    hw.cc = cc or (product[1] if product else None)
    hw.cc_source = "device" if cc else "product" if product else None
    hw.product = product[0] if product else None
    hw.sm_count = _get(launch, mm.SM_COUNT) or (float(product[2]) if product else None)
    if hw.cc is None:  # no device attributes: what the kernel names and the SM count support, said as such
        report = launch.memo.get("report") or {}
        names = sorted({other.short_name for other in report.get("launches", [launch]) if other.short_name})
        hw.cc, hw.cc_basis = hwt.infer_cc(names, hw.sm_count)
        hw.cc_source = "inferred" if hw.cc else None
    hw.sm_hz = _get(launch, mm.SM_HZ)
    l2 = _get(launch, mm.L2_SIZE)
    if l2:
        hw.l2_bytes, hw.l2_bytes_source = l2, "device"
    elif product:
        hw.l2_bytes, hw.l2_bytes_source = float(product[4]), "table"
    arch = hwt.arch_key(hw.cc)
    hw.latency_cycles = dict(hwt.LATENCY_CYCLES.get(arch, {})) if arch else {}
    _flop_peaks(launch, hw, arch)
    # DRAM from device attributes, else the product table; report/implied peaks are filled per level.
    khz, bits = _get(launch, mm.MEM_KHZ), _get(launch, mm.BUS_BITS)
    if khz and bits:
        hw.bandwidth["dram"] = hwt.Peak(2.0 * khz * 1e3 * bits / 8.0, "device")
    elif product:
        hw.bandwidth["dram"] = hwt.Peak(product[3], "table")
    return hw


def _flop_peaks(launch: Launch, hw: hwt.Hardware, arch: str | None) -> None:
    if hw.sm_hz:
        for prec, name, factor in mm.PEAK_METRICS:
            per_cycle = launch.raw.get(name)
            if per_cycle:
                hw.flops[prec] = hwt.Peak(factor * per_cycle * hw.sm_hz, "report")
    if arch and hw.sm_count and hw.sm_hz:
        source = "device" if _get(launch, mm.SM_COUNT) else "table"
        for prec, per_sm in hwt.FLOPS_PER_SM_CYCLE[arch].items():
            hw.flops.setdefault(prec, hwt.Peak(per_sm * hw.sm_count * hw.sm_hz, source))


def _bytes(launch: Launch, spec: mm.LevelSpec, duration_s: float | None) -> tuple[float | None, float | None]:
    """(bytes, bytes/s) of a level: byte counters, else sectors x 32, else the exported rate x duration."""
    total = _get(launch, spec.bytes)
    if total is None:
        sectors = _get(launch, spec.sectors)
        total = sectors * hwt.SECTOR_BYTES if sectors is not None else None
    if total is None and spec.key in ("dram",):
        parts = [_get(launch, m) for _, m, _ in spec.parts]
        if all(p is not None for p in parts) and parts:
            total = sum(p for p in parts if p is not None)
    rate = total / duration_s if total is not None and duration_s else None
    if rate is None:
        rate = _get(launch, spec.rate)
        if rate is not None and total is None and duration_s:
            total = rate * duration_s
    return total, rate


class Level(TypedDict):
    """One memory level of a launch (``levels``): bytes, throughput, share of peak, the peak and its source, hit rate and
    the parts (by direction or kind) its bytes are made of."""

    name: str
    label: str
    bytes: float | None
    throughput_bps: float | None
    pct_of_peak: float | None
    peak_bps: float | None
    peak_source: str | None
    hit_rate_pct: float | None
    parts: dict[str, float]


class SectorsPerRequest(TypedDict):
    """Global loads (``ld``) and stores (``st``): L1TEX sectors per request and the ideal for the access width."""

    ld: float | None
    ld_ideal: float | None
    ld_ideal_source: str | None
    ld_ideal_assumption: str | None
    ld_bytes_per_sector: float | None
    st: float | None
    st_ideal: float | None
    st_ideal_source: str | None
    st_ideal_assumption: str | None
    st_bytes_per_sector: float | None


class LoadWait(TypedDict, total=False):
    """The observed wait per global load (``_load_wait``), against the typical latency where known."""

    load_wait_cycles: float
    load_wait_vs_typical: float
    load_wait_verdict: str


class LittlesLaw(LoadWait, total=False):
    """Bytes in flight needed vs sustained at the serving level, and per warp (``_littles_law``)."""

    serving_level: str | None
    latency_ns_typical: float | None
    latency_cycles_typical: float | None
    bytes_in_flight_needed: float
    bytes_in_flight: float
    resident_warps: float
    bytes_per_warp_request: float
    requests_in_flight_per_warp: float
    requests_in_flight_per_warp_needed: float


class BoundNumbers(LittlesLaw, total=False):
    """The numbers that decide a launch's bound."""

    busiest_level: str | None
    busiest_level_pct: float | None
    compute_pct: float | None
    cycles_per_issue: float | None
    memory_latency_stall_share: float | None
    memory_queue_stall_share: float | None
    issue_active: float | None
    memory_pct: float | None
    bandwidth_threshold_pct: float


class Bound(TypedDict):
    """What bounds a launch (``bound``): latency, bandwidth, compute or unknown, at which level, and why."""

    kind: Literal["latency", "bandwidth", "compute", "unknown"]
    level: str | None
    numbers: BoundNumbers
    reason: str


class Roofline(TypedDict):
    """A launch on the roofline (``roofline``): FLOPs per precision, achieved FLOP/s, the peaks, the intensity per DRAM
    and L2 byte, and where FLOPs were counted, the roof it sits under and the share of it reached."""

    flops: dict[str, float]
    flops_total: float
    achieved_flops: float | None
    peaks: dict[str, dict[str, object]]
    intensity_dram: float | None
    intensity_l2: float | None
    precision: NotRequired[str | None]
    roof: NotRequired[str | None]
    attainable_flops: NotRequired[float | None]
    pct_of_roof: NotRequired[float | None]
    compute_roof_unknown: NotRequired[str]
    compute_peak_known: NotRequired[bool]


class _Busiest(NamedTuple):
    name: str
    label: str
    pct_of_peak: float


def levels(launch: Launch, hw: hwt.Hardware) -> list[Level]:
    """One entry per level with any metric: bytes, throughput, share of peak, peak and its source, hit rate."""
    duration_s = launch.duration_ns / 1e9 if launch.duration_ns else None
    out: list[Level] = []
    for spec in mm.LEVELS:
        if not _has_level(launch, spec):
            continue
        total, rate = _bytes(launch, spec, duration_s)
        pct = _get(launch, spec.pct)
        hit = _get(launch, spec.hit) if spec.hit else None
        parts: dict[str, float] = {}
        for name, metric, scale in spec.parts:
            value = _get(launch, metric)
            if value is not None and name not in parts:
                parts[name] = value * scale
        if total is None and pct is None and hit is None and not parts:
            continue
        peak = _level_peak(launch, spec, hw, rate, pct)
        if pct is None and rate is not None and peak is not None and peak.value > 0:
            pct = 100.0 * rate / peak.value
        if peak is not None:
            hw.bandwidth[spec.key] = peak
        out.append({"name": spec.key, "label": spec.label, "bytes": total, "throughput_bps": rate,
                    "pct_of_peak": pct, "peak_bps": peak.value if peak else None,
                    "peak_source": peak.source if peak else None, "hit_rate_pct": hit, "parts": parts})
    return out


def _level_peak(launch: Launch, spec: mm.LevelSpec, hw: hwt.Hardware, rate: float | None,
                pct: float | None) -> hwt.Peak | None:
    per_cycle, clock = _get(launch, spec.peak), _get(launch, spec.clock)
    if per_cycle and clock:
        return hwt.Peak(per_cycle * clock, "report")
    if rate and pct and pct > 0:
        return hwt.Peak(rate / (pct / 100.0), "implied")
    return hw.bandwidth.get(spec.key)


def sectors_per_request(launch: Launch) -> SectorsPerRequest:
    """Global loads and stores: L1TEX sectors per request, and the ideal for the access width.

    Ideal = sectors per request x useful bytes per sector / 32: a warp whose 32 threads read 4-byte words
    needs 4 sectors; one thread per sector (a 128-byte stride) uses 32, 8x the ideal. Without ncu's bytes
    per sector the ideal comes from ``access_width.ideal_per_request``, as NCU001's does (``*_ideal_source``).
    """
    ld, ld_ideal, ld_source, ld_assumption, ld_bps = _sectors(launch, "ld")
    st, st_ideal, st_source, st_assumption, st_bps = _sectors(launch, "st")
    return {"ld": ld, "ld_ideal": ld_ideal, "ld_ideal_source": ld_source, "ld_ideal_assumption": ld_assumption,
            "ld_bytes_per_sector": ld_bps, "st": st, "st_ideal": st_ideal, "st_ideal_source": st_source,
            "st_ideal_assumption": st_assumption, "st_bytes_per_sector": st_bps}


def _sectors(launch: Launch, op: str) -> tuple[float | None, float | None, str | None, str | None, float | None]:
    """One operation's sectors per request, its ideal, the ideal's source and assumption, and bytes per sector."""
    spr = _get(launch, mm.SECTORS_PER_REQUEST[op])
    sectors, requests = _get(launch, mm.SECTORS[op]), _get(launch, mm.REQUESTS[op])
    if spr is None and sectors is not None and requests:
        spr = sectors / requests
    bps = _get(launch, mm.BYTES_PER_SECTOR[op])
    # The same width inference as NCU001, so the page's ideal is the rule's.
    width = ideal_per_request(launch, op, spr, bps) if spr is not None else None
    if width is None:
        return spr, None, None, None, bps
    return spr, width.ideal_sectors_per_request, width.source, width.assumption or None, bps


def _stall_share(launch: Launch, reasons: tuple[str, ...], cpi: float | None) -> float | None:
    values = [launch.raw.get(mm.STALL.format(r)) for r in reasons]
    known = [v for v in values if v is not None]
    if not known or not cpi:
        return None
    return sum(known) / cpi


def bound(launch: Launch, hw: hwt.Hardware, lvls: list[Level], spr: SectorsPerRequest,
          params: Mapping[str, float] = DEFAULTS) -> Bound:
    """Latency, bandwidth, compute or unknown, with the numbers that decide it (see the module docstring)."""
    mem = {lv["name"]: _Busiest(lv["name"], lv["label"], pct) for lv in lvls if (pct := lv["pct_of_peak"]) is not None}
    busiest = max(mem.values(), key=lambda lv: lv.pct_of_peak) if mem else None
    overall = _get(launch, MEM_PCT)
    if busiest is None and overall is not None:
        # Only ncu's speed-of-light "Memory Throughput" (the busiest memory unit, unnamed): it still decides.
        busiest = _Busiest("memory", "Memory (ncu's busiest unit)", overall)
    sm = _get(launch, SM_PCT)
    cpi = _get(launch, CYCLES_PER_ISSUE)
    latency_share = _stall_share(launch, mm.MEMORY_LATENCY_STALLS, cpi)
    queue_share = _stall_share(launch, mm.MEMORY_QUEUE_STALLS, cpi)
    numbers: BoundNumbers = {
        "busiest_level": busiest.name if busiest else None,
        "busiest_level_pct": busiest.pct_of_peak if busiest else None,
        "compute_pct": sm, "cycles_per_issue": cpi, "memory_latency_stall_share": latency_share,
        "memory_queue_stall_share": queue_share, "issue_active": _get(launch, ISSUE_ACTIVE),
        "memory_pct": overall, "bandwidth_threshold_pct": params["bandwidth_pct"],
    }
    numbers.update(_littles_law(launch, hw, lvls, spr))
    limit = params["bandwidth_pct"]
    if busiest and busiest.pct_of_peak >= limit and (sm is None or busiest.pct_of_peak >= sm):
        return {"kind": "bandwidth", "level": busiest.name, "numbers": numbers,
                "reason": f"{busiest.label} at {fmt.pct(busiest.pct_of_peak)} of its peak (>= {fmt.pct(limit)})"}
    if sm is not None and sm >= limit:
        return {"kind": "compute", "level": None, "numbers": numbers,
                "reason": f"SM throughput {fmt.pct(sm)} of peak (>= {fmt.pct(limit)})"}
    if busiest and latency_share is not None and latency_share >= params["min_stall_share"]:
        need, have = numbers.get("bytes_in_flight_needed"), numbers.get("bytes_in_flight")
        why = (f"warps wait on memory results {fmt.pct(100 * latency_share)} of the cycles between instructions while "
               f"{busiest.label} runs at {fmt.pct(busiest.pct_of_peak)} of peak")
        if need and have is not None:
            why += f"; {fmt.size(have)} in flight where Little's law needs {fmt.size(need)}"
        if numbers.get("load_wait_verdict"):
            why += f"; each global load waits {fmt.number(numbers['load_wait_cycles'])} cycles, {numbers['load_wait_verdict']}"
        return {"kind": "latency", "level": numbers.get("serving_level"), "numbers": numbers, "reason": why}
    if busiest is None and sm is None:
        # Say a metric is missing only when it is: pipe, instruction and shared-memory shares still count.
        others = sorted(n for n, v in launch.raw.items() if v is not None and ".pct_of_peak_sustained" in n)
        reason = (f"no memory or SM speed-of-light metrics (the export has {fmt.count(len(others))} other throughput "
                  f"metrics, e.g. {others[0]}); collect `ncu {mm.COLLECT}`" if others
                  else f"no throughput metrics; collect `ncu {mm.COLLECT}`")
    elif latency_share is None:
        reason = "under the bandwidth threshold, but no warp-stall metrics to tell latency from other limits " \
                 "(collect `ncu --section WarpStateStats`)"
    else:
        reason = "under the bandwidth threshold, and memory stalls do not dominate"
    return {"kind": "unknown", "level": None, "numbers": numbers, "reason": reason}


def _littles_law(launch: Launch, hw: hwt.Hardware, lvls: list[Level], spr: SectorsPerRequest) -> LittlesLaw:
    """Bytes in flight needed (latency x peak bandwidth) vs sustained (latency x achieved bandwidth) and per warp."""
    by = {lv["name"]: lv for lv in lvls}
    l2 = by.get("l2")
    # Loads are served from DRAM unless most L2 lookups hit; a measured low L2 hit rate names DRAM even where
    # the export has no DRAM metrics (L2 is never the serving level at a near-0% hit rate).
    hit = l2["hit_rate_pct"] if l2 else None
    level = "l2" if (hit is not None and hit >= 50.0) or (hit is None and "dram" not in by) else "dram"
    lv = by.get(level)
    latency_ns = hw.latency_ns(level)
    out: LittlesLaw = {"serving_level": level if lv or (level == "dram" and hit is not None) else None,
                           "latency_ns_typical": latency_ns,
                           "latency_cycles_typical": hw.latency_cycles.get(level)}
    out.update(_load_wait(launch, hw.latency_cycles.get(level)))
    if not lv or latency_ns is None or (peak := lv["peak_bps"]) is None or (rate := lv["throughput_bps"]) is None:
        return out
    needed = peak * latency_ns * 1e-9
    have = rate * latency_ns * 1e-9
    out.update({"bytes_in_flight_needed": needed, "bytes_in_flight": have})
    warps_per_sm = _get(launch, mm.WARPS_PER_SM)
    if warps_per_sm and hw.sm_count:
        warps = warps_per_sm * hw.sm_count
        request = (spr.get("ld") or WARP_REQUEST_BYTES / hwt.SECTOR_BYTES) * hwt.SECTOR_BYTES
        out.update({"resident_warps": warps, "bytes_per_warp_request": request,
                    "requests_in_flight_per_warp": have / warps / request,
                    "requests_in_flight_per_warp_needed": needed / warps / request})
    return out


def _load_wait(launch: Launch, typical: float | None) -> LoadWait:
    """Observed wait per global load: long-scoreboard warp-cycles / global load instructions, against the typical.

    Long-scoreboard stall warp-cycles = the stall ratio per issue-active cycle x issued instructions (one per
    issue-active cycle). Divided by the warp-level global loads, it is the time each load's consumer waited:
    near the typical latency = each load pays the full latency; far above = queued behind other requests;
    well below = partly hidden by independent work. Local and texture loads also stall on the long
    scoreboard, so this is an upper bound for global loads.
    """
    ratio, issued, loads = (_get(launch, mm.LONG_SCOREBOARD), _get(launch, mm.INST_ISSUED),
                            _get(launch, mm.GLOBAL_LOADS))
    if ratio is None or not issued or not loads:
        return {}
    wait = ratio * issued / loads
    out: LoadWait = {"load_wait_cycles": wait}
    if typical:
        rel = wait / typical
        out["load_wait_vs_typical"] = rel
        out["load_wait_verdict"] = ("well above the typical latency: requests queue (bandwidth or throttling)"
                                    if rel > 2 else "about the typical latency: each load pays it in full"
                                    if rel >= 0.5 else "below the typical latency: partly hidden by independent work")
    return out


def roofline(launch: Launch, hw: hwt.Hardware, lvls: list[Level]) -> Roofline | None:
    """FLOPs per precision, intensity per DRAM and L2 byte, achieved FLOP/s, the roof it sits under and the distance."""
    flops: dict[str, float] = {}
    raw = launch.raw
    for prec, terms in mm.FLOP_TERMS:
        total, seen = 0.0, False
        for name, k in terms:
            v = raw.get(name)
            if v is not None:
                total += v * k
                seen = True
        if seen:
            flops[prec] = total
    if not flops:
        return None
    total = sum(flops.values())
    duration_s = launch.duration_ns / 1e9 if launch.duration_ns else None
    by = {lv["name"]: lv for lv in lvls}
    b_dram, b_l2 = ((lv["bytes"] if (lv := by.get(key)) else None) for key in ("dram", "l2"))
    out: Roofline = {"flops": flops, "flops_total": total, "achieved_flops": total / duration_s if duration_s else None,
                     "peaks": {p: pk.to_dict() for p, pk in hw.flops.items()},
                     "intensity_dram": total / b_dram if b_dram else None, "intensity_l2": total / b_l2 if b_l2 else None}
    if total <= 0:
        out.update({"precision": None, "roof": None, "attainable_flops": None, "pct_of_roof": None})
        return out
    precision = max(flops, key=flops.__getitem__)
    out["precision"] = precision
    roofs: list[tuple[float, str]] = []
    if precision in hw.flops:
        roofs.append((hw.flops[precision].value, "compute"))
    for key, intensity in (("dram", out["intensity_dram"]), ("l2", out["intensity_l2"])):
        peak = lv["peak_bps"] if (lv := by.get(key)) else None
        if intensity is not None and peak:
            roofs.append((intensity * peak, key))
    if not roofs:
        out.update({"roof": None, "attainable_flops": None, "pct_of_roof": None})
        return out
    attainable, roof = min(roofs)
    if precision not in hw.flops:  # judged against the memory roofs alone: say why there is no compute roof
        out["compute_roof_unknown"] = (hw.cc_basis or "") if hw.cc is None else \
            "the SM count is unknown" if not hw.sm_count else "the SM clock is unknown" if not hw.sm_hz else \
            f"no {precision} rate for compute capability {hw.cc} in the table"
    out.update({"roof": roof, "attainable_flops": attainable, "compute_peak_known": precision in hw.flops,
                "pct_of_roof": 100.0 * out["achieved_flops"] / attainable if out["achieved_flops"] and attainable
                else None})
    return out


def _finite(value: Any) -> Any:
    """Non-finite numbers (overflow from hostile metric values) become None: the story is JSON without NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def story(launch: Launch, params: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The whole memory story of one launch (the ``memory`` entry of the JSON contract).

    Computed once per launch with the default thresholds and kept on it (rules and the report summary share
    it); other thresholds recompute only the bound.
    """
    cached = launch.memo.get("memory")
    if cached is None:
        hw = _hardware(launch, launch.cc, launch.device_name)
        lvls = levels(launch, hw)
        spr = sectors_per_request(launch)
        cached = {
            "levels": lvls,
            "sectors_per_request": spr,
            "bound": bound(launch, hw, lvls, spr, DEFAULTS),
            "roofline": roofline(launch, hw, lvls),
            "hardware": {"cc": hw.cc, "cc_source": hw.cc_source, "cc_basis": hw.cc_basis, "product": hw.product, "sm_count": hw.sm_count, "sm_hz": hw.sm_hz,
                         "l2_bytes": hw.l2_bytes, "l2_bytes_source": hw.l2_bytes_source,
                         "latency_cycles_typical": hw.latency_cycles or None},
        }
        if not (launch.memo.get("plan") or _present(launch))["moderate"]:
            cached = _finite(cached)
        launch.memo["memory"] = cached
        launch.memo["hardware"] = hw
    if params is None or all(params.get(k, v) == v for k, v in DEFAULTS.items()):
        return cached
    out = dict(cached)
    out["bound"] = _finite(bound(launch, launch.memo["hardware"], cached["levels"], cached["sectors_per_request"],
                                 {**DEFAULTS, **{k: params[k] for k in DEFAULTS if k in params}}))
    return out
