"""Peak throughputs and typical memory latencies of NVIDIA GPUs: the report's own numbers first, a cited table after.

Where a number comes from, in order of preference (each peak says which in ``source``):

1. ``report``: ncu's own peak metrics, ``<counter>.peak_sustained`` (per cycle) x ``<unit>__cycles_elapsed.avg
   .per_second``, e.g. ``dram__bytes.sum.peak_sustained`` x ``dram__cycles_elapsed.avg.per_second`` and
   2 x ``sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained`` x ``sm__cycles_elapsed.avg.per_second``
   (the formulas of ncu's SpeedOfLight_RooflineChart section and its SOLFPRoofline rule).
2. ``implied``: achieved rate / ncu's own ``pct_of_peak_sustained_elapsed`` of the same unit (ncu defines the
   percentage as achieved / peak sustained, so the quotient is ncu's peak).
3. ``device``: device attributes of a ``--page raw`` export: DRAM = 2 x ``device__attribute_max_mem_frequency_khz``
   x ``device__attribute_global_memory_bus_width`` / 8 (the double-data-rate formula of NVIDIA's "How to
   Implement Performance Metrics in CUDA C/C++", developer.nvidia.com/blog); FLOP/s = per-SM rate below x
   ``device__attribute_multiprocessor_count`` x the measured SM clock.
4. ``table``: the per-architecture and per-product tables below, from NVIDIA's architecture whitepapers
   (Volta GV100, Turing, Ampere GA100 and GA102, Ada AD102, Hopper H100, Blackwell) and product data sheets,
   divided by SM count and boost clock to get per-SM, per-cycle rates (dense, no sparsity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analysis import fmt

# Dense FLOPs per SM per cycle by compute capability: vector FP64/FP32/FP16 (FMA = 2 FLOPs, half2 = 2 lanes)
# and tensor cores per input precision. Source: NVIDIA whitepapers (peak TFLOPS / (SMs x boost clock)), e.g.
# A100: 19.5 TFLOPS FP32 / (108 SMs x 1.41 GHz) = 128; H100 SXM: 989 TFLOPS FP16 tensor / (132 x 1.83 GHz) = 4096.
# GeForce GA102/AD102 halve FP16 tensor math with FP32 accumulation; the professional parts' rate is listed.
FLOPS_PER_SM_CYCLE: dict[str, dict[str, float]] = {
    "7.0": {"fp64": 64, "fp32": 128, "fp16": 256, "tensor_fp16": 1024},                              # V100
    "7.5": {"fp64": 4, "fp32": 128, "fp16": 256, "tensor_fp16": 1024},                               # T4, RTX 20
    "8.0": {"fp64": 64, "fp32": 128, "fp16": 512, "tensor_fp16": 2048, "tensor_tf32": 1024,
            "tensor_fp64": 128},                                                                        # A100, A30
    "8.6": {"fp64": 4, "fp32": 256, "fp16": 256, "tensor_fp16": 1024, "tensor_tf32": 512},           # A10, A40, RTX 30
    "8.9": {"fp64": 4, "fp32": 256, "fp16": 256, "tensor_fp16": 1024, "tensor_tf32": 512,
            "tensor_fp8": 2048},                                                                        # L4, L40S, RTX 40
    "9.0": {"fp64": 128, "fp32": 256, "fp16": 512, "tensor_fp16": 4096, "tensor_tf32": 2048,
            "tensor_fp8": 8192, "tensor_fp64": 256},                                                    # H100, H200
    "10.0": {"fp64": 128, "fp32": 256, "fp16": 512, "tensor_fp16": 8192, "tensor_tf32": 4096,
             "tensor_fp8": 16384},                                                                      # B200 (approx.)
}

# Typical load-to-use latency in SM cycles (L1 hit, L2 hit, DRAM), measured with pointer-chase
# microbenchmarks: Volta: Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking"
# (arXiv:1804.06826); Turing: Jia et al., "Dissecting the NVidia Turing T4 GPU via Microbenchmarking"
# (arXiv:1903.07486); Ampere: Abdelkhalik et al., "Demystifying the Nvidia Ampere Architecture through
# Microbenchmarking and Instruction-level Analysis" (arXiv:2208.11174); Hopper: Luo et al., "Benchmarking
# and Dissecting the Nvidia Hopper GPU Architecture" (arXiv:2402.13499). Ada/GA10x use the Ampere values
# (same L1 design; their larger L2 is somewhat slower). Orders of magnitude for judging what is normal;
# the exact figure varies with clocks, TLB hits and L2 partition distance.
LATENCY_CYCLES: dict[str, dict[str, float]] = {
    "7.0": {"l1": 28, "l2": 193, "dram": 400},
    "7.5": {"l1": 32, "l2": 188, "dram": 300},
    "8.0": {"l1": 33, "l2": 200, "dram": 290},
    "8.6": {"l1": 33, "l2": 200, "dram": 290},
    "8.9": {"l1": 33, "l2": 200, "dram": 290},
    "9.0": {"l1": 33, "l2": 262, "dram": 479},
    "10.0": {"l1": 33, "l2": 262, "dram": 479},
}

# Products: (name fragment, compute capability, SMs, DRAM bytes/s, L2 bytes), from NVIDIA data sheets.
# Matched against device__attribute_display_name / the CSV's device name, most specific first.
PRODUCTS: list[tuple[str, str, int, float, int]] = [
    ("H200", "9.0", 132, 4.8e12, 50 * 2**20),
    ("H100 PCIe", "9.0", 114, 2.0e12, 50 * 2**20),
    ("H100", "9.0", 132, 3.35e12, 50 * 2**20),
    ("A100-SXM4-80GB", "8.0", 108, 2.039e12, 40 * 2**20),
    ("A100 80GB PCIe", "8.0", 108, 1.935e12, 40 * 2**20),
    ("A100", "8.0", 108, 1.555e12, 40 * 2**20),
    ("A30", "8.0", 56, 0.933e12, 24 * 2**20),
    ("A40", "8.6", 84, 0.696e12, 6 * 2**20),
    ("A10", "8.6", 72, 0.600e12, 6 * 2**20),
    ("L40S", "8.9", 142, 0.864e12, 96 * 2**20),
    ("L4", "8.9", 58, 0.300e12, 48 * 2**20),
    ("RTX 4090", "8.9", 128, 1.008e12, 72 * 2**20),
    ("RTX 3090", "8.6", 82, 0.936e12, 6 * 2**20),
    ("V100", "7.0", 80, 0.900e12, 6 * 2**20),
    ("T4", "7.5", 40, 0.320e12, 4 * 2**20),
]

SECTOR_BYTES = 32


@dataclass
class Peak:
    """One peak rate (per second) and where it came from."""

    value: float
    source: str  # report | implied | device | table

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "source": self.source}


@dataclass
class Hardware:
    """What is known of the GPU a launch ran on."""

    cc: str | None = None
    cc_source: str | None = None   # device | product | inferred (see ``cc_basis``)
    cc_basis: str | None = None    # what the inference rests on, or why it failed
    product: str | None = None
    sm_count: float | None = None
    sm_hz: float | None = None
    l2_bytes: float | None = None
    l2_bytes_source: str | None = None
    bandwidth: dict[str, Peak] = field(default_factory=dict)   # level -> bytes/s
    flops: dict[str, Peak] = field(default_factory=dict)       # precision -> FLOP/s
    latency_cycles: dict[str, float] = field(default_factory=dict)

    def latency_ns(self, level: str) -> float | None:
        cycles = self.latency_cycles.get(level)
        return cycles / self.sm_hz * 1e9 if cycles is not None and self.sm_hz else None


def product_for(name: str | None) -> tuple[str, str, int, float, int] | None:
    """The product row whose name fragment the device name contains ('NVIDIA A100-SXM4-80GB' -> A100-SXM4-80GB)."""
    if not name:
        return None
    for row in PRODUCTS:
        if row[0].lower() in name.lower():
            return row
    return None


def arch_key(cc: str | None) -> str | None:
    """'8.0' for '8.0' or '8'; None when the compute capability is unknown or not in the tables."""
    if not cc:
        return None
    text = cc.strip()
    if "." not in text:
        text += ".0"
    return text if text in FLOPS_PER_SM_CYCLE else None


# Architecture markers in library kernel names: cuBLAS/cuDNN prefix their kernels with the architecture
# they were built for (ampere_sgemm_..., sm80_xmma_..., sm90_xmma_...), CUTLASS with cutlass_80_/cutlass_90_.
# "ampere_" covers GA100 (8.0) and GA10x (8.6), whose FP32 rates per SM differ: it needs another fact.
_FAMILY_PREFIX = {"volta": ("7.0",), "turing": ("7.5",), "ampere": ("8.0", "8.6"), "ada": ("8.9",),
                  "hopper": ("9.0",), "blackwell": ("10.0",)}
_FAMILY = re.compile(r"^(volta|turing|ampere|ada|hopper|blackwell)_", re.IGNORECASE)
_SM_PREFIX = re.compile(r"(?:^|[^0-9a-z])(?:sm|cutlass)_?(\d)(\d)a?_", re.IGNORECASE)


def ccs_from_name(short_name: str | None) -> tuple[set[str], str]:
    """Compute capabilities a kernel name's architecture marker allows, and the marker (empty: none)."""
    if not short_name:
        return set(), ""
    m = _FAMILY.match(short_name)
    if m:
        return set(_FAMILY_PREFIX[m[1].lower()]), m[0]
    m = _SM_PREFIX.search(short_name)
    if m:
        cc = f"{int(m[1])}.{int(m[2])}" if m[1] != "1" else None
        return ({cc}, m[0].lstrip("_")) if cc and cc in FLOPS_PER_SM_CYCLE else (set(), "")
    return set(), ""


def infer_cc(names: list[str], sm_count: float | None) -> tuple[str | None, str]:
    """The compute capability the data supports when the report has no device attributes, and on what basis.

    Kernel-name markers (intersected over the report's kernels) and the SM count (matched against the
    product table) each narrow the candidates; a single one left is the answer, else None with the reason."""
    basis: list[str] = []
    candidates: set[str] | None = None
    for name in names:
        found, marker = ccs_from_name(name)
        if found:
            candidates = found if candidates is None else candidates & found
            if f"kernel name {marker}" not in basis:
                basis.append(f"kernel name {marker}")
    if sm_count:
        by_sms = {cc for _, cc, sms, _, _ in PRODUCTS if sms == int(sm_count)}
        if by_sms:
            candidates = by_sms if candidates is None else candidates & by_sms
            basis.append(f"{fmt.count(sm_count)} SMs")
    if candidates and len(candidates) == 1:
        return next(iter(candidates)), " and ".join(basis)
    if candidates:
        return None, (f"{' and '.join(basis)}: compute capability {' or '.join(sorted(candidates))}, "
                      "whose per-SM rates differ")
    return None, "no device attributes, architecture marker in kernel names or known SM count"
