"""What limits one profiled launch, decided from its metrics: launch shape, a memory level, a pipe, issue, latency
or occupancy, with the metrics that decide it.

In order (the first that holds names the limiter):

1. ``launch``: the grid fills less than one wave of the SMs (``launch__waves_per_multiprocessor`` < 1), or the
   launch is tiny (under ``TINY_NS``) with no unit above ``IDLE_PCT`` of peak: more warps per SM cannot help;
   batching, fusing or a larger problem per launch can.
2. the binding term of the speed of light (``analysis.diagnosis.ncu.sol``) at or above ``SATURATED_PCT`` of its
   peak (ncu's SOLBottleneck threshold): ``memory`` (the level), ``pipe`` (the pipe or precision, tensor cores
   included), ``issue`` (the schedulers issue every cycle), ``compute`` (SM throughput with no pipe named).
3. ``occupancy``: no unit near its peak, the grid fills at least one wave, warps wait on memory (memory
   stall share >= 30% of the cycles between instructions) and fewer than half the warp slots can be resident
   (theoretical occupancy < ``LOW_OCCUPANCY_PCT``): more resident warps would hide the latency.
4. ``latency``: no unit near its peak and warps wait on memory (the stall share) with enough warps resident.
5. ``unknown``: none of the above can be told from the metrics the export has (said with what is missing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from analysis import fmt
from analysis.diagnosis.ncu import sol
from analysis.diagnosis.ncu.hardware import ccs_from_name
from analysis.model.ncu_metrics import Launch, Metric

SATURATED_PCT = 60.0       # ncu's SOLBottleneck: a unit at 60% of peak or more bounds the kernel
IDLE_PCT = 20.0            # a tiny launch with no unit above this is launch latency
TINY_NS = 10_000.0         # launches shorter than this are dominated by fixed launch and ramp costs
LOW_OCCUPANCY_PCT = 50.0
MIN_STALL_SHARE = 0.3      # ncu's CPIStall: a stall reason over 30% of the cycles between instructions matters

WAVES = Metric(("launch__waves_per_multiprocessor",), (("launchstatistics", "Waves Per SM", 1.0),))
THEORETICAL = Metric(("sm__maximum_warps_per_active_cycle_pct",), (("occupancy", "Theoretical Occupancy", 1.0),))
ACHIEVED = Metric(("sm__warps_active.avg.pct_of_peak_sustained_active",), (("occupancy", "Achieved Occupancy", 1.0),))
# Tensor-pipe activity as each generation names it: Volta/Turing ``pipe_tensor``, Ampere+ ``tensor_op_hmma`` (also
# ``imma``/``dmma``), Hopper ``tensor_op_gmma`` (wgmma), Blackwell ``tensor_op_tcgen05``/``tc`` (UTC*MMA). All are
# read: a GPU uses its tensor cores when any of them counts anything.
TENSOR_COUNTS = tuple(f"sm__{kind}_{pipe}{suffix}.sum" for kind, suffix in (("inst_executed_pipe", ""),
                                                                         ("pipe", "_cycles_active"))
                      for pipe in ("tensor", "tensor_op_hmma", "tensor_op_imma", "tensor_op_dmma", "tensor_op_gmma",
                                   "tensor_op_tcgen05", "tc"))
SHARED_CONFLICTS = Metric(("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",))
SHARED_WAVEFRONTS = Metric(("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",))
FP32_PIPES = ("fma", "fp32", "fmaheavy", "fmalite", "fp64", "alu", "fp16")

# Library kernels, recognised by name: advice is about the call, never their internals.
LIBRARIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("FlashInfer", re.compile(r"flashinfer", re.I)),
    ("FlashAttention", re.compile(r"flash_fwd|flash_bwd|flash::|fmha|flash_attn", re.I)),
    ("nvjet (cuBLAS)", re.compile(r"nvjet", re.I)),
    ("CUTLASS", re.compile(r"cutlass", re.I)),
    ("cuDNN", re.compile(r"cudnn|implicit_convolve|convolve_sgemm|winograd|fft2d_r2c|xmma_fprop|xmma_dgrad", re.I)),
    ("cuBLAS", re.compile(r"cublas|^(volta|turing|ampere|ada|hopper|sm\d+)_[a-z0-9]*gemm|splitKreduce|gemv2?T?_kernel|"
                          r"gemmSN|xmma_gemm|sm\d+_xmma", re.I)),
)


def library(name: str) -> str | None:
    """The library a kernel comes from, by its name (None: the user's own kernel, as far as the name says)."""
    for lib, pattern in LIBRARIES:
        if pattern.search(name or ""):
            return lib
    return None


def library_advice(lib: str) -> str:
    """What to change for a library kernel: the call (its internals are the library's)."""
    return (f"A {lib} kernel: its code is the library's, so change the call: a larger or batched problem per call "
            "(batched/grouped GEMM, more images per convolution), dimensions that are multiples of 8/16 for the "
            "tensor-core paths, a tensor-core precision (TF32, BF16/FP16, FP8), the layout the library prefers "
            f"(e.g. NHWC, no transposed copies), or a newer {lib} version or algorithm (cuBLASLt heuristics, "
            "cudnn.benchmark).")


def tensor_family(cc: str | None) -> str | None:
    """The tensor-core instruction family a compute capability offers (None: none, or unknown)."""
    if not cc:
        return None
    try:
        major = int(cc.split(".")[0])
    except ValueError:
        return None
    if major >= 12:
        return "mma.sync (Blackwell GeForce)"
    if major == 10:
        return "tcgen05 (Blackwell)"
    if major == 9:
        return "wgmma (Hopper)"
    if major >= 7:
        return "mma.sync (HMMA)"
    return None


class TensorCores(TypedDict):
    """Whether the GPU has tensor cores (their instruction ``family``) and whether the launch used them."""

    family: str | None
    used: bool | None
    instructions: float | None
    pipe_pct: float | None
    legacy_path: str | None


class LimiterNumbers(TypedDict):
    """The metrics a launch's limiter is decided on (``limiter``; None: not exported): its grid's waves per SM, its
    occupancy, its warps' memory-latency stall share and cycles per issue, the L2 hit rate, the speed of light's
    bound, the duration, and the shared memory's bank conflicts, wavefronts and throughput."""

    waves_per_sm: float | None
    theoretical_occupancy_pct: float | None
    achieved_occupancy_pct: float | None
    memory_latency_stall_share: float | None
    cycles_per_issue: float | None
    l2_hit_rate_pct: float | None
    sol_bound_ns: float | None
    duration_ns: float | None
    shared_bank_conflicts: float | None
    shared_wavefronts: float | None
    shared_pct: float | None


class LimiterEvidence(LimiterNumbers):
    """The limiter's metrics and the speed of light's binding unit (in the JSON after ``l2_hit_rate_pct``)."""

    binding: sol.Binding | None


class Limiter(TypedDict):
    """A launch's limiter (``limiter``): kind, name, why, then its evidence metrics, tensor cores and library."""

    kind: str
    name: str
    reason: str
    evidence: NotRequired[LimiterEvidence]
    tensor_cores: NotRequired[TensorCores]
    library: NotRequired[str | None]


def tensor_cores(launch: Launch, cc: str | None) -> TensorCores:
    """Whether the GPU has tensor cores and whether this launch used them (``used`` None: not measured)."""
    counts = [v for v in (launch.raw.get(n) for n in TENSOR_COUNTS) if v is not None]
    inst = max(counts) if counts else None
    pipes = sol.pipe_shares(launch)
    tensor_pct = max((v for p, (v, _) in pipes.items() if p.startswith("tensor")), default=None)
    used: bool | None = None
    if inst is not None:
        used = inst > 0
    if tensor_pct is not None:
        used = bool(used) or tensor_pct >= 0.5
    out: TensorCores = {"family": tensor_family(cc), "used": used, "instructions": inst, "pipe_pct": tensor_pct, "legacy_path": None}
    # Hopper and Blackwell run mma.sync (HMMA) only at a fraction of wgmma/tcgen05's rate: the older path in use
    # with none of the native one counted is the wrong instruction family for the GPU.
    native = {"9": ("tensor_op_gmma",), "10": ("tensor_op_tcgen05", "tc")}.get((cc or "").split(".")[0])
    hmma = [launch.raw.get(f"sm__{k}_tensor_op_hmma{s}.sum") for k, s in (("inst_executed_pipe", ""),
                                                                         ("pipe", "_cycles_active"))]
    if native and any(v for v in hmma if v):
        names = [f"sm__{k}_{p}{s}.sum" for p in native for k, s in (("inst_executed_pipe", ""), ("pipe", "_cycles_active"))]
        measured = [launch.raw.get(n) for n in names if launch.raw.get(n) is not None]
        if not any(measured):
            out["legacy_path"] = "mma.sync (HMMA)"
    return out


def _numbers(launch: Launch, story: Mapping[str, Any], bound: sol.SpeedOfLight) -> LimiterEvidence:
    b = story.get("bound") or {}
    n = b.get("numbers") or {}
    l2 = next((lv for lv in story.get("levels") or [] if lv["name"] == "l2"), None)
    return {"waves_per_sm": launch.get(WAVES), "theoretical_occupancy_pct": launch.get(THEORETICAL),
            "achieved_occupancy_pct": launch.get(ACHIEVED), "memory_latency_stall_share": n.get("memory_latency_stall_share"),
            "cycles_per_issue": n.get("cycles_per_issue"), "l2_hit_rate_pct": (l2 or {}).get("hit_rate_pct"),
            "binding": bound.get("binding"), "sol_bound_ns": bound.get("bound_ns"), "duration_ns": launch.duration_ns,
            "shared_bank_conflicts": launch.get(SHARED_CONFLICTS), "shared_wavefronts": launch.get(SHARED_WAVEFRONTS),
            "shared_pct": launch.get(sol.SHARED_PCT)}


def limiter(launch: Launch) -> Limiter:
    """The launch's limiter (``kind``, ``name``, ``reason``) with its evidence metrics (see the module docstring)."""
    cached = launch.memo.get("limiter")
    if cached is not None:
        return cached
    from analysis.diagnosis.ncu.memory import story as memory_story

    story = memory_story(launch)
    bound = sol.bound(launch)
    ev = _numbers(launch, story, bound)
    cc = (story.get("hardware") or {}).get("cc")
    if cc is None:  # "ampere_" says 8.0 or 8.6: both offer the same tensor-core instructions
        families = {tensor_family(c) for c in ccs_from_name(launch.short_name)[0]}
        cc = next(iter(ccs_from_name(launch.short_name)[0])) if len(families) == 1 and None not in families else None
    tc = tensor_cores(launch, cc)
    out = _decide(launch, bound, ev, tc)
    out["evidence"] = ev
    out["tensor_cores"] = tc
    out["library"] = library(launch.name)
    launch.memo["limiter"] = out
    return out


def _decide(launch: Launch, bound: sol.SpeedOfLight, ev: LimiterEvidence, tc: TensorCores) -> Limiter:
    top = bound["binding"]
    top_pct = top["pct_of_peak"] if top else None
    waves, dur = ev["waves_per_sm"], launch.duration_ns
    if waves is not None and waves < 1:
        return {"kind": "launch", "name": "sub-wave grid",
                "reason": f"the grid fills {fmt.number(waves)} of a wave of the SMs: most SMs idle, more warps per SM cannot help"}
    busiest = max((t["pct_of_peak"] or 0.0 for t in bound["terms"]), default=None)
    if dur is not None and dur < TINY_NS and (busiest is None or busiest < IDLE_PCT):
        what = "no unit measured" if busiest is None else f"no unit above {fmt.pct(busiest)} of peak"
        return {"kind": "launch", "name": "tiny launch",
                "reason": f"{fmt.duration(dur)} with {what}: fixed launch and ramp costs dominate"}
    if top and top_pct is not None and top_pct >= SATURATED_PCT:
        return _saturated(top, ev, tc)
    stall = ev["memory_latency_stall_share"]
    theo = ev["theoretical_occupancy_pct"]
    shown = "no unit measured" if busiest is None else f"the busiest unit at {fmt.pct(busiest)} of peak"
    if stall is not None and stall >= MIN_STALL_SHARE:
        if waves is not None and waves >= 1 and theo is not None and theo < LOW_OCCUPANCY_PCT:
            return {"kind": "occupancy", "name": "resident warps",
                    "reason": f"{shown}; warps wait on memory {fmt.pct(100 * stall)} of the cycles between instructions and "
                              f"only {fmt.pct(theo)} of the warp slots can be resident"}
        return {"kind": "latency", "name": "memory latency",
                "reason": f"{shown}; warps wait on memory {fmt.pct(100 * stall)} of the cycles between instructions"}
    if busiest is None:
        shares = [n for n, v in launch.raw.items() if v is not None and ".pct_of_peak_sustained" in n]
        if dur is None and shares:
            return {"kind": "unknown", "name": "duration unknown",
                    "reason": f"the export has {fmt.count(len(shares))} throughput metrics (e.g. {sorted(shares)[0]}) but no "
                              "duration (gpu__time_duration, or sm__cycles_elapsed with its clock) to weigh them with"}
        return {"kind": "unknown", "name": "no throughput metrics",
                "reason": "the export has no throughput, byte or instruction metrics to bound the kernel with"}
    return {"kind": "latency" if stall is not None else "unknown", "name": "no unit near peak",
            "reason": f"{shown} (under {fmt.pct(SATURATED_PCT)})" + (
                "" if stall is not None else "; no warp-stall metrics to tell memory latency from other limits")}


def _saturated(top: sol.Binding, ev: LimiterEvidence, tc: TensorCores) -> Limiter:
    kind, name, pct = top["kind"], top["name"], top["pct_of_peak"]
    if kind == "memory":
        label = {"memory": "memory (ncu's busiest unit)", "shared": "shared memory"}.get(name, sol.level_label(name))
        reason = f"{label} at {fmt.pct(pct)} of its peak ({top['basis']})"
        hit = ev["l2_hit_rate_pct"]
        if name == "l2" and hit is not None and hit < 50:
            reason += f"; with an L2 hit rate of {fmt.pct(hit)} the data come from DRAM, not from L2"
        return {"kind": "memory", "name": name, "reason": reason}
    if kind == "issue":
        return {"kind": "issue", "name": "issue", "reason": f"the schedulers issue at {fmt.pct(pct)} of their peak"}
    if kind == "pipe":
        tensor = name.startswith("tensor")
        reason = f"the {name} pipe at {fmt.pct(pct)} of its peak"
        if tensor and tc.get("legacy_path") and tc.get("family"):
            reason += (f", on the older {tc['legacy_path']} path where this GPU's native {tc['family']} instructions run "
                       "the same math faster: compute-bound on the wrong instructions")
        if not tensor and tc.get("used") is False and tc.get("family"):
            reason += f"; the tensor cores are unused ({tc['family']} on this GPU)"
        return {"kind": "pipe", "name": name, "reason": reason}
    return {"kind": "compute", "name": "sm", "reason": f"SM throughput at {fmt.pct(pct)} of peak ({top['basis']})"}


def tensor_unused(lim: Mapping[str, Any]) -> bool:
    """The launch's math runs on the FP32/FMA pipes of a tensor-core GPU that leaves its tensor pipe idle."""
    tc = lim.get("tensor_cores") or {}
    name = lim.get("name") or ""
    return lim.get("kind") in ("pipe", "compute") and tc.get("used") is False and bool(tc.get("family")) and \
        not name.startswith("tensor") and (lim["kind"] == "compute" or name in FP32_PIPES)
