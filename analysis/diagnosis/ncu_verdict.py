"""The verdict of an ncu report: one sentence on the kernel that costs most, its limiter, the realistic gain and
the next step (``analysis.results.Verdict``, as an nsys report has one).

The kernel is a group of launches with the same name, grid and block (``Launch.group_key``); its cost is its
nsys GPU time when the run links it (``nsys_total_ns``), else its profiled time. The group that leads is the one
whose findings save the most (their shared, speed-of-light-bounded gains), else the longest. Its sentence says:
the kernel and its time, the limiter of its longest launch (``analysis.diagnosis.ncu.limiter``) with the
evidence, the first finding on it (causes first), the most any fix can save (duration - speed of light,
summed over its launches, scaled to nsys time when linked) and the realistic gain, reaching
``sol.REALISTIC_SHARE`` of the binding resource's peak. A report with no finding still gets one: the limiter
and what to collect or look at next.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from analysis import fmt
from analysis.diagnosis.findings import Finding
from analysis.diagnosis.ncu import sol
from analysis.diagnosis.rules.ncu.common import NcuRule
from analysis.diagnosis.rules.registry import default_registry
from analysis.report_types import ReportInfo
from analysis.result_parts import NcuKernel
from analysis.results import NcuExtra, Verdict

if TYPE_CHECKING:
    from analysis.diagnosis.ncu.kernels import SolPart
    from analysis.diagnosis.ncu.limiter import Limiter

# The vocabulary of an ncu verdict's ``kind`` (an nsys verdict's kinds are analysis.diagnosis.verdict.KINDS).
KINDS: dict[str, str] = {
    "ncu_launch": "the costliest kernel's grid or problem is too small for the GPU: batch, fuse or enlarge it",
    "ncu_memory": "the costliest kernel is bound by a memory level's bandwidth",
    "ncu_compute": "the costliest kernel is bound by a pipe, the SM or instruction issue",
    "ncu_tensor_unused": "the costliest kernel does its math on FP32/FMA pipes of a GPU whose tensor cores sit idle",
    "ncu_latency": "the costliest kernel waits on memory latency with no unit near its peak",
    "ncu_occupancy": "the costliest kernel has too few resident warps to hide its latency",
    "ncu_unknown": "the export lacks the metrics to name the costliest kernel's limiter",
}

NEXT_STEP = {
    "launch": "batch more work into each launch (more images, sequences or matrices per call) or fuse it with its "
              "neighbours; a CUDA graph removes the launch gaps",
    "memory": "move fewer bytes (fuse, reuse through shared memory or cache, narrower types); "
              "near the peak, only less traffic helps",
    "compute": "execute fewer or cheaper instructions (lower precision, tensor cores, less redundant math)",
    "tensor_unused": "move the math onto tensor cores: TF32/BF16/FP16 (or FP8) through cuBLAS/cuDNN math modes, AMP, "
                     "or a tensor-core kernel",
    "latency": "raise the bytes in flight: more independent loads per thread, vectorized accesses, prefetching "
               "(cp.async/TMA), and check the warp stalls",
    "occupancy": "raise resident warps: fewer registers or less shared memory per block, or a block size that "
                 "fits the SM's limits",
    "unknown": "collect the missing sections: `ncu --section SpeedOfLight --section MemoryWorkloadAnalysis "
               "--section LaunchStats --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis`",
}
LIBRARY_STEP = ("change the call, not the kernel: a larger or batched problem per call, dimensions that are multiples "
                "of 8/16, a tensor-core precision (TF32/BF16/FP16), the layout the library prefers, or a newer {lib} "
                "version or algorithm")


def _kind(lim: Limiter) -> str:
    from analysis.diagnosis.ncu.limiter import tensor_unused

    if tensor_unused(lim):
        return "tensor_unused"
    kind = lim.get("kind") or "unknown"
    return {"pipe": "compute", "issue": "compute"}.get(kind, kind)


def _us(ns: float | None) -> str:
    if ns is None:
        return "unknown"
    return fmt.duration(ns)


def _shape(dims: tuple[int, ...] | None) -> str:
    """A launch dimension as the group key spells it: its JSON list's ``str`` (``_findings_on`` compares it with the
    finding's, and the key breaks ties between groups, so its text must not change)."""
    return str(None if dims is None else list(dims))


def _groups(kernels: Sequence[NcuKernel]) -> dict[tuple, list[NcuKernel]]:
    out: dict[tuple, list[NcuKernel]] = defaultdict(list)
    for k in kernels:
        out[(k.name, _shape(k.grid), _shape(k.block))].append(k)
    return out


def _limiter(kernel: NcuKernel) -> Limiter | None:
    """The launch's limiter in its memory story (``analysis.diagnosis.ncu.kernels.LimiterPart``; None: not
    computed)."""
    return cast("Limiter | None", kernel.memory.get("limiter"))


def _sol_bound(kernel: NcuKernel) -> float | None:
    """The launch's speed-of-light bound in its memory story (``analysis.diagnosis.ncu.kernels.SolPart``)."""
    part = cast("SolPart | None", kernel.memory.get("sol"))
    return part.get("bound_ns") if part else None


@functools.cache
def _ncu_rules() -> dict[str, type[NcuRule]]:
    return {r.id: r for r in default_registry() if issubclass(r, NcuRule)}


def _rule(finding: Finding) -> type[NcuRule]:
    """The ncu rule of ``finding``, whose traits the verdict reads (``NcuRule``, its traits at their defaults, for a
    rule the registry does not hold)."""
    return _ncu_rules().get(finding.rule_id, NcuRule)


def _findings_on(findings: Sequence[Finding], report: str, key: tuple) -> list[tuple[Finding, NcuExtra]]:
    """The ncu findings of ``report`` on the kernel ``key`` (name, grid, block), each with its extra, causes first."""
    mine = []
    for f in findings:
        extra = f.extra
        if f.report != report or f.rule_id not in _ncu_rules() or not isinstance(extra, NcuExtra):
            continue
        grid, block = extra.kernel_grid, extra.kernel_block
        if extra.kernel != key[0]:
            continue
        # Launches exported without grid/block dims are keyed by their sizes in findings: the name decides.
        if key[1] == "None" or (str(grid if isinstance(grid, list) else None), str(block if isinstance(block, list)
                                                                                   else None)) == key[1:]:
            mine.append((f, extra))
    return sorted(mine, key=lambda fe: fe[1].cause_order or 0)


def report_verdict(info: ReportInfo, findings: Sequence[Finding]) -> Verdict | None:
    """The verdict of one ncu report (``info``: its summary with ``kernels``, read once as ``NcuKernel``), None
    when it profiled no kernel."""
    kernels = [NcuKernel.from_json(k) for k in info.get("kernels") or []]
    if not kernels:
        return None
    report = info.get("file")
    scored = []
    for key, launches in _groups(kernels).items():
        mine = [f for f, _ in _findings_on(findings, str(report), key)]
        saving = sum(int(f.impact_ns or 0) for f in mine)
        linked = next((k.nsys_total_ns for k in launches if k.nsys_total_ns is not None), None)
        profiled = sum(k.duration_ns or 0.0 for k in launches)
        scored.append((saving, linked if linked is not None else profiled, key, launches, mine, linked))
    saving, cost, key, launches, mine, linked = max(scored, key=lambda s: (s[0], s[1], s[2]))
    lead = max(launches, key=lambda k: (k.duration_ns or 0.0, -k.kernel_id))
    lim: Limiter = _limiter(lead) or {"kind": "unknown", "name": "", "reason": "no limiter computed"}
    kind = _kind(lim)
    name = lead.short_name or lead.name
    n = len(launches)
    where = f"{_us(cost)} in nsys" if linked is not None else f"{_us(cost) if cost else 'unknown duration'} profiled"
    text = f"{name} ({fmt.count(n)} launch{'es' if n > 1 else ''}, {where}) is {_limiter_phrase(kind, lim)}"
    text += _mix(launches)
    if mine:
        first = mine[0]
        text += f"; first: {first.title.split(':')[0]} ({first.rule_id})"
    after = _after_fix(mine[0], lead, cost) if mine else ""
    # A fix that removes work is bounded by the work it leaves, not by today's: one bound, not two.
    text += _gain(launches, saving, linked, cost, kind, same_work=not after) + after
    text += _shared_note(lim)
    lib = lim.get("library")
    step = LIBRARY_STEP.format(lib=lib) if lib and kind in ("memory", "compute", "latency", "occupancy") \
        else NEXT_STEP[kind]
    # A cause found on the kernel names the next step better than its limiter does (``NcuRule.cause_step``).
    if mine and not lib and _rule(mine[0]).cause_step and (mine[0].impact_ns or 0) > 0:
        step = _rule(mine[0]).cause_step
    if lib and kind == "launch":
        step = f"{NEXT_STEP['launch']} ({lib} kernel: batch at the call, e.g. a batched or grouped {lib} call)"
    return Verdict(f"ncu_{kind}", text + ".", int(saving) if mine else None, step,
                   mine[0].rule_id if mine else None)


def _limiter_phrase(kind: str, lim: Limiter) -> str:
    reason = lim.get("reason") or ""
    if kind == "tensor_unused":
        cores = lim.get("tensor_cores")
        family = (cores.get("family") if cores else None) or "tensor-core instructions"
        return f"doing its math on the FP32/FMA pipes with the tensor cores unused ({family} on this GPU): {reason}"
    return {"launch": "too small for the GPU", "memory": "memory-bound", "compute": "compute-bound",
            "latency": "latency-bound", "occupancy": "occupancy-limited",
            "unknown": "not classified"}[kind] + f": {reason}"


def _gain(launches: Sequence[NcuKernel], saving: int, linked: float | None, cost: float, kind: str,
          same_work: bool = True) -> str:
    """The findings' saving, the most any fix can save and the realistic gain (profiled launches, scaled to nsys)."""
    bounds = [(k.duration_ns, _sol_bound(k)) for k in launches]
    known = [(d, b) for d, b in bounds if d and b is not None]
    parts = []
    if saving:
        parts.append(f"its findings save up to {_us(saving)}")
    if known and len(known) == len(bounds) and same_work:
        profiled = sum(d for d, _ in known)
        ceiling = sum(d - b for d, b in known)
        real = sum(sol.realistic(d, b) or 0.0 for d, b in known)
        scale = (linked / profiled) if linked is not None and profiled else 1.0
        if kind == "launch":  # the time is fixed cost, not work: peaks say how little work there is
            parts.append(f"its work would take {_us(sum(b for _, b in known) * scale)} at the GPU's peaks, "
                         "so the rest is launch and ramp cost that only more work per launch amortises")
            return "; " + "; ".join(parts)
        parts.append(f"at the same work the speed of light leaves at most {_us(ceiling * scale)}, and reaching "
                     f"{fmt.pct(100 * sol.REALISTIC_SHARE)} of the binding unit's peak would save {_us(real * scale)}")
    elif not known and same_work:
        parts.append("its speed of light is unknown")
    return ("; " + "; ".join(parts)) if parts else ""


def attach(results: Sequence[Any]) -> Verdict | None:
    """Each ncu report's verdict kept in its ``info`` (``reports[].verdict``); returns the one whose kernel
    saves the most (the run's verdict when the run has no nsys report)."""
    best: Verdict | None = None
    for r in results:
        if r.tool != "ncu":
            continue
        verdict = report_verdict(r.info, r.findings)
        if verdict is None:
            continue
        r.info["verdict"] = verdict.to_json()
        if best is None or (verdict.impact_ns or 0) > (best.impact_ns or 0):
            best = verdict
    return best


def _shared_note(lim: Limiter) -> str:
    """Where the export measured shared memory and it is clean: say so (conflict-free, pipe far from its peak)."""
    ev = lim.get("evidence")
    if not ev:
        return ""
    conflicts, wavefronts, pct = ev.get("shared_bank_conflicts"), ev.get("shared_wavefronts"), ev.get("shared_pct")
    if conflicts is None or not wavefronts or conflicts > 0.1 * wavefronts:
        return ""
    busy = f", shared pipe at {fmt.pct(pct)} of peak" if pct is not None else ""
    return (f"; shared memory is not the problem: {fmt.number(conflicts)} bank conflicts over {fmt.number(wavefronts)} "
            f"wavefronts{busy}")


def _after_fix(first: Finding, lead: NcuKernel, cost: float) -> str:
    """For a fix that removes work: the realistic gain on the work left, as a share of the lead launch applied to
    the kernel's time (its assumption: the fixed kernel reaches ``REALISTIC_SHARE`` of the binding unit's peak).
    Fixes that remove work are the rule's trait (``NcuRule.removes_work``: fewer bytes or wavefronts moved)."""
    if not _rule(first).removes_work:
        return ""
    detail = (first.evidence[0].detail if first.evidence else None) or {}
    after, dur = detail.get("sol_bound_ns"), lead.duration_ns
    if after is None or not dur or not cost:
        return ""
    share = max(0.0, 1.0 - after / sol.REALISTIC_SHARE / dur)
    claimed = int(first.impact_ns or 0)
    reach = "so its estimate is within reach" if share * cost >= claimed else \
        f"so about {_us(share * cost)} of its estimate is within reach"
    return (f"; fixed, the work left takes {_us(after * cost / dur)} at the binding unit's peak and "
            f"{_us(after / sol.REALISTIC_SHARE * cost / dur)} at {fmt.pct(100 * sol.REALISTIC_SHARE)} of it, {reach}")


def _mix(launches: Sequence[NcuKernel]) -> str:
    """Launches of one kernel with different limiters (a size sweep): how many and how much time each has."""
    kinds: dict[str, list[float]] = defaultdict(list)
    for k in launches:
        lim = _limiter(k)
        kinds[(lim.get("kind") if lim else None) or "unknown"].append(k.duration_ns or 0.0)
    if len(kinds) < 2:
        return ""
    parts = sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
    return " (its launches by limiter: " + ", ".join(f"{kind} {fmt.count(len(v))} ({_us(sum(v))})" for kind, v in parts) + ")"
