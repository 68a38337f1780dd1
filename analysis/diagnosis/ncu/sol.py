"""The speed of light of one profiled launch: the least time its work could take at the GPU's peaks.

A kernel cannot run faster than its busiest resource allows. Each term is the launch's work on one resource
divided by that resource's peak rate:

- memory levels: bytes moved at the level / the level's peak bandwidth (``analysis.diagnosis.ncu.memory.levels``:
  ncu's own peak per cycle x clock, else achieved / ncu's % of peak, else device attributes, else the product
  table of ``analysis.diagnosis.ncu.hardware``); a level with only ncu's ``% of peak`` gives duration x share;
- math: FLOPs per precision / the peak of the pipe that executes them (vector FP64/FP32/FP16, tensor cores);
- issue: warp instructions issued / (SMs x 4 schedulers x SM clock), one instruction per scheduler per cycle
  on every architecture since Volta;
- units ncu reports only as a share of peak (SM throughput, pipes, shared-memory wavefronts, the busiest memory
  unit): duration x share, which is the unit's work at its peak rate (ncu's ``pct_of_peak_sustained_elapsed``
  = achieved / peak over the elapsed time; ``_active`` shares are scaled by active / elapsed cycles when
  the export has both, else taken as they are, which overstates the bound and so understates savings).

The bound is the largest term; the binding term names the resource. A rule that removes work (wasted sectors,
bank conflicts) bounds its saving with the terms after that work is removed (``scale``). Unknown when no
term can be formed; the launch's savings are then bounded by its duration alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from analysis import fmt
from analysis.model.ncu_metrics import MEM_PCT, SM_PCT, Launch, Metric

SCHEDULERS_PER_SM = 4       # warp schedulers (SMSPs) per SM, Volta through Blackwell
REALISTIC_SHARE = 0.85      # the share of peak well-tuned kernels reach (the corpus's large kernels: 75-85%)
INST_ISSUED = Metric(("smsp__inst_issued.sum", "sm__inst_issued.sum"), (("", "Issued Instructions", 1.0),))
INST_PCT = Metric(("sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed",))
INST_PCT_ACTIVE = Metric(("sm__instruction_throughput.avg.pct_of_peak_sustained_active",
                          "sm__inst_issued.avg.pct_of_peak_sustained_active",
                          "smsp__issue_active.avg.pct_of_peak_sustained_active"), (("", "Issue Slots Busy", 1.0),))
SM_ACTIVE = Metric(("sm__cycles_active.avg",), (("", "SM Active Cycles", 1.0),))
SM_ELAPSED = Metric(("sm__cycles_elapsed.avg",), (("", "Elapsed Cycles", 1.0),))
SHARED_PCT = Metric(("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",))
# Pipe utilisation as exported by ncu generations: ``sm__pipe_<p>_cycles_active`` (cycles the pipe is busy) and
# ``sm__inst_executed_pipe_<p>`` (instructions it executed), each as a share of peak, elapsed or active.
PIPE_FORMS = (("sm__pipe_", "_cycles_active.avg.pct_of_peak_sustained_elapsed", 1),
              ("sm__inst_executed_pipe_", ".avg.pct_of_peak_sustained_elapsed", 1),
              ("sm__pipe_", "_cycles_active.avg.pct_of_peak_sustained_active", 0),
              ("sm__inst_executed_pipe_", ".avg.pct_of_peak_sustained_active", 0))
LEVEL_LABEL = {"dram": "DRAM", "l2": "L2", "l1": "L1/TEX", "sysmem": "system memory", "peer": "peer memory"}


def _share(seconds: float, dur: float | None) -> float | None:
    """Seconds of work at peak as a % of the duration (None: no duration, or one too small to divide by)."""
    dur_s = (dur or 0.0) * 1e-9
    return 100.0 * seconds / dur_s if dur_s > 0 else None


class Term(TypedDict):
    """One speed-of-light term: its kind (memory, compute, pipe, issue), name, time in ns, how it was computed, and
    the share of peak it stands for."""

    kind: str
    name: str
    ns: float
    basis: str
    pct_of_peak: float | None


class Binding(TypedDict):
    kind: str
    name: str
    basis: str
    pct_of_peak: float | None


class SpeedOfLight(TypedDict):
    """A launch's speed of light (``bound``)."""

    bound_ns: float | None
    binding: Binding | None
    terms: list[Term]
    duration_ns: float | None
    max_saving_ns: float | None
    realistic_saving_ns: float | None
    realistic_share: float


def _term(kind: str, name: str, seconds: float, basis: str, pct: float | None = None) -> Term:
    return {"kind": kind, "name": name, "ns": seconds * 1e9, "basis": basis, "pct_of_peak": pct}


def _active_ratio(launch: Launch) -> float | None:
    active, elapsed = launch.get(SM_ACTIVE), launch.get(SM_ELAPSED)
    return active / elapsed if active is not None and elapsed and 0 <= active <= elapsed else None


def pipe_shares(launch: Launch) -> dict[str, tuple[float, str]]:
    """Each pipe's share of peak over the elapsed time, with the metric it came from (largest spelling wins)."""
    ratio = _active_ratio(launch)
    out: dict[str, tuple[float, str]] = {}
    for prefix, suffix, elapsed in PIPE_FORMS:
        for pipe, pct in launch.matching(prefix, suffix).items():
            if pct is None or pct < 0:
                continue
            share = pct if elapsed or ratio is None else pct * ratio
            if pipe not in out or share > out[pipe][0]:
                out[pipe] = (share, prefix + pipe + suffix)
    return out


def terms(launch: Launch, memory: Mapping[str, Any], hw: Any, scale: Mapping[str, float] | None = None,
          ) -> list[Term]:
    """Every speed-of-light term the launch's metrics allow (see the module docstring), in ns.

    ``memory``: the launch's memory story; ``hw``: its ``Hardware``; ``scale``: per memory level (and
    ``memory``/``shared``) the share of the work that remains after a fix (1 = all of it)."""
    scale = scale or {}
    dur = launch.duration_ns
    out: list[Term] = []
    for lv in memory.get("levels") or []:
        key, factor = lv["name"], scale.get(lv["name"], 1.0)
        if lv.get("bytes") is not None and lv.get("peak_bps") and lv["peak_bps"] > 0:
            # An implied peak (achieved / ncu's share) makes bytes / peak = share x duration: said so, since ncu's
            # share of a level is its busiest sub-unit's, not always its bytes'.
            basis = (f"{fmt.pct(lv['pct_of_peak'])} of peak x duration ({fmt.size(lv['bytes'])})"
                     if lv["peak_source"] == "implied" and lv.get("pct_of_peak") is not None else
                     f"{fmt.size(lv['bytes'])} / {fmt.rate(lv['peak_bps'])} peak ({lv['peak_source']})")
            out.append(_term("memory", key, factor * lv["bytes"] / lv["peak_bps"], basis, lv.get("pct_of_peak")))
        elif lv.get("pct_of_peak") is not None and dur:
            out.append(_term("memory", key, factor * dur * 1e-9 * lv["pct_of_peak"] / 100.0,
                             f"{fmt.pct(lv['pct_of_peak'])} of peak x duration", lv["pct_of_peak"]))
    if dur:
        mem = launch.get(MEM_PCT)
        if mem is not None and mem >= 0:
            out.append(_term("memory", "memory", scale.get("memory", 1.0) * dur * 1e-9 * mem / 100.0,
                             f"ncu's busiest memory unit {fmt.pct(mem)} of peak x duration", mem))
        sm = launch.get(SM_PCT)
        if sm is not None and sm >= 0:
            out.append(_term("compute", "sm", dur * 1e-9 * sm / 100.0, f"SM throughput {fmt.pct(sm)} of peak x duration",
                             sm))
        shared = launch.get(SHARED_PCT)
        if shared is not None and shared >= 0:
            out.append(_term("memory", "shared", scale.get("shared", 1.0) * dur * 1e-9 * shared / 100.0,
                             f"shared-memory wavefronts {fmt.pct(shared)} of peak x duration", shared))
        for pipe, (share, metric) in pipe_shares(launch).items():
            out.append(_term("pipe", pipe, dur * 1e-9 * share / 100.0, f"{metric} {fmt.pct(share)} x duration", share))
    roof = memory.get("roofline") or {}
    for prec, flops in (roof.get("flops") or {}).items():
        peak = hw.flops.get(prec) if hw is not None else None
        if flops and peak is not None and peak.value > 0:
            pct = _share(flops / peak.value, dur)
            out.append(_term("pipe", prec, flops / peak.value,
                             f"{fmt.number(flops)} FLOP / {fmt.si(peak.value, 'FLOP/s')} {prec} peak ({peak.source})", pct))
    out.extend(_issue(launch, hw, dur))
    return out


def _issue(launch: Launch, hw: Any, dur: float | None) -> list[Term]:
    issued = launch.get(INST_ISSUED)
    if issued is not None and hw is not None and hw.sm_count and hw.sm_hz and issued >= 0:
        rate = hw.sm_count * SCHEDULERS_PER_SM * hw.sm_hz
        if not rate > 0:
            return []
        pct = _share(issued / rate, dur)
        return [_term("issue", "issue", issued / rate, f"{fmt.number(issued)} warp instructions / "
                      f"({fmt.count(hw.sm_count)} SMs x {SCHEDULERS_PER_SM} schedulers x {fmt.si(hw.sm_hz, 'Hz')})", pct)]
    pct = launch.get(INST_PCT)
    if pct is None and (active := launch.get(INST_PCT_ACTIVE)) is not None and (r := _active_ratio(launch)) is not None:
        pct = active * r
    if pct is not None and dur and pct >= 0:
        return [_term("issue", "issue", dur * 1e-9 * pct / 100.0, f"instruction throughput {fmt.pct(pct)} of peak "
                      "x duration", pct)]
    return []


def bound(launch: Launch, scale: Mapping[str, float] | None = None) -> SpeedOfLight:
    """The launch's speed of light: ``bound_ns`` (None: unknown), the binding term, every term, and
    ``max_saving_ns`` = duration - bound (the most any fix can save; the duration when the bound is unknown)."""
    key = None if scale is None else tuple(sorted(scale.items()))
    cache: dict[tuple | None, SpeedOfLight] = launch.memo.setdefault("sol", {})
    if key in cache:
        return cache[key]
    from analysis.diagnosis.ncu.memory import story  # memory imports the rules' metric helpers at import

    memory = story(launch)
    hw = launch.memo.get("hardware")
    found = [t for t in terms(launch, memory, hw, scale) if t["ns"] == t["ns"] and t["ns"] >= 0]
    dur = launch.duration_ns
    top = max(found, key=lambda t: t["ns"]) if found else None
    bound_ns = top["ns"] if top else None
    if bound_ns is not None and dur:
        bound_ns = min(bound_ns, dur)  # a counter over its peak (replay noise) never makes a negative saving
    out: SpeedOfLight = {
        "bound_ns": bound_ns,
        "binding": None if top is None else {"kind": top["kind"], "name": top["name"], "basis": top["basis"],
                                             "pct_of_peak": top["pct_of_peak"]},
        "terms": sorted(found, key=lambda t: -t["ns"]),
        "duration_ns": dur,
        "max_saving_ns": None if dur is None else dur - (bound_ns or 0.0),
        "realistic_saving_ns": realistic(dur, bound_ns),
        "realistic_share": REALISTIC_SHARE,
    }
    cache[key] = out
    return out


def realistic(duration_ns: float | None, bound_ns: float | None) -> float | None:
    """What reaching ``REALISTIC_SHARE`` of the binding resource's peak would save (None when unknown)."""
    if duration_ns is None or bound_ns is None:
        return None
    return max(0.0, duration_ns - bound_ns / REALISTIC_SHARE)


def cap_fraction(launch: Launch, fraction: float, scale: Mapping[str, float] | None = None) -> float:
    """A rule's speedup fraction for one launch, bounded by its speed of light: at most 1 - bound / duration."""
    fraction = min(max(fraction, 0.0), 1.0)
    dur = launch.duration_ns
    if not dur:
        return fraction
    b = bound(launch, scale)["bound_ns"]
    if b is None:
        return fraction
    return min(fraction, max(0.0, 1.0 - b / dur))


def level_label(name: str) -> str:
    return LEVEL_LABEL.get(name, name)

