"""NVIDIA metric names behind the per-kernel memory story (raw ``--metrics``/``--page raw`` names and section display names)."""

from __future__ import annotations

from dataclasses import dataclass

from analysis.model.ncu_metrics import Metric


def raw(*names: str) -> Metric:
    return Metric(tuple(names))


@dataclass(frozen=True)
class LevelSpec:
    """How one level of the memory hierarchy is measured.

    ``bytes``: metrics in bytes; ``sectors``: the same traffic in 32-byte sectors (used when bytes are absent);
    ``parts``: named sub-flows (bytes, or sectors when the name ends in ``_sectors``); ``pct``: ncu's share of
    peak; ``rate``: bytes/s when only a rate is exported; ``peak`` x ``clock``: ncu's peak per cycle.
    """

    key: str
    label: str
    bytes: Metric
    sectors: Metric
    parts: tuple[tuple[str, Metric, float], ...] = ()
    pct: Metric = Metric()
    rate: Metric = Metric()
    peak: Metric = Metric()
    clock: Metric = Metric()
    hit: Metric | None = None


SOL, MWA = "gpuspeedoflight", "memoryworkloadanalysis"
S = 32.0  # bytes per sector

LEVELS: tuple[LevelSpec, ...] = (
    LevelSpec(
        "l1", "L1/TEX", raw("l1tex__t_bytes.sum"), raw("l1tex__t_sectors.sum"),
        parts=(("global_ld", raw("l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum"), 1.0),
               ("global_ld", raw("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"), S),
               ("global_st", raw("l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum"), 1.0),
               ("global_st", raw("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"), S),
               ("local_ld", raw("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"), 1.0),
               ("local_ld", raw("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"), S),
               ("local_st", raw("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"), 1.0),
               ("local_st", raw("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"), S),
               ("shared", raw("sm__sass_data_bytes_mem_shared.sum"), 1.0)),
        pct=Metric(("l1tex__throughput.avg.pct_of_peak_sustained_elapsed",),
                   ((SOL, "L1/TEX Cache Throughput", 1.0),)),
        peak=raw("derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained"),
        clock=raw("l1tex__cycles_elapsed.avg.per_second"),
        hit=Metric(("l1tex__t_sector_hit_rate.pct",), ((MWA, "L1/TEX Hit Rate", 1.0),)),
    ),
    LevelSpec(
        "l2", "L2", raw("lts__t_bytes.sum"), raw("lts__t_sectors.sum"),
        parts=(("read", raw("lts__t_sectors_op_read.sum"), S), ("write", raw("lts__t_sectors_op_write.sum"), S),
               ("atomic", raw("lts__t_sectors_op_atom.sum"), S), ("reduction", raw("lts__t_sectors_op_red.sum"), S)),
        pct=Metric(("lts__throughput.avg.pct_of_peak_sustained_elapsed",), ((SOL, "L2 Cache Throughput", 1.0),)),
        rate=raw("lts__t_bytes.sum.per_second"),
        peak=raw("derived__lts__lts2xbar_bytes.sum.peak_sustained"),
        clock=raw("lts__cycles_elapsed.avg.per_second"),
        hit=Metric(("lts__t_sector_hit_rate.pct",), ((MWA, "L2 Hit Rate", 1.0),)),
    ),
    LevelSpec(
        "dram", "DRAM", raw("dram__bytes.sum"), Metric(),
        parts=(("read", raw("dram__bytes_read.sum"), 1.0), ("write", raw("dram__bytes_write.sum"), 1.0)),
        pct=Metric(("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                    "dram__bytes.sum.pct_of_peak_sustained_elapsed"), ((SOL, "DRAM Throughput", 1.0),)),
        # The Memory Workload Analysis section's "Memory Throughput" in byte/s is dram__bytes.sum.per_second.
        rate=Metric(("dram__bytes.sum.per_second",), ((MWA, "Memory Throughput", 1.0),)),
        peak=raw("dram__bytes.sum.peak_sustained"),
        clock=Metric(("dram__cycles_elapsed.avg.per_second",), ((SOL, "DRAM Frequency", 1.0),)),
    ),
    LevelSpec(
        "sysmem", "System memory", raw("lts__t_bytes_aperture_sysmem.sum"), raw("lts__t_sectors_aperture_sysmem.sum"),
        parts=(("pcie_read", raw("pcie__read_bytes.sum"), 1.0), ("pcie_write", raw("pcie__write_bytes.sum"), 1.0)),
    ),
    LevelSpec(
        "peer", "Peer (NVLink/PCIe)", raw("lts__t_bytes_aperture_peer.sum"), raw("lts__t_sectors_aperture_peer.sum"),
        parts=(("nvlink_rx", raw("nvlrx__bytes.sum"), 1.0), ("nvlink_tx", raw("nvltx__bytes.sum"), 1.0)),
    ),
)

# Global loads/stores: sectors and requests at L1TEX, and the useful bytes per sector (access width).
SECTORS = {op: raw(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum") for op in ("ld", "st")}
REQUESTS = {op: raw(f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum") for op in ("ld", "st")}
SECTORS_PER_REQUEST = {op: raw(f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{op}.ratio")
                       for op in ("ld", "st")}
BYTES_PER_SECTOR = {op: raw(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio")
                    for op in ("ld", "st")}

SM_HZ = Metric(("sm__cycles_elapsed.avg.per_second",), ((SOL, "SM Frequency", 1.0),))
SM_COUNT = Metric(("device__attribute_multiprocessor_count",), (("launchstatistics", "# SMs", 1.0),))
L2_SIZE = raw("device__attribute_l2_cache_size")
MEM_KHZ = raw("device__attribute_max_mem_frequency_khz", "device__attribute_memory_clock_rate")  # both kHz
BUS_BITS = raw("device__attribute_global_memory_bus_width", "device__attribute_fb_bus_width")
CC_MAJOR, CC_MINOR = raw("device__attribute_compute_capability_major"), raw("device__attribute_compute_capability_minor")
WARPS_PER_SM = Metric(("sm__warps_active.avg.per_cycle_active",), (("occupancy", "Achieved Active Warps Per SM", 1.0),))

# Stall reasons that mean waiting on memory (ncu's Kernel Profiling Guide): long scoreboard = an L1TEX
# (global, local, texture) result; lg/mio throttle = the memory instruction queues are full.
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
MEMORY_LATENCY_STALLS = ("long_scoreboard", "memory_dependency")
MEMORY_QUEUE_STALLS = ("lg_throttle", "mio_throttle", "memory_throttle")

LONG_SCOREBOARD = raw(STALL.format("long_scoreboard"))
INST_ISSUED = raw("smsp__inst_issued.sum")
GLOBAL_LOADS = raw("smsp__inst_executed_op_global_ld.sum", "smsp__sass_inst_executed_op_global_ld.sum")

# FLOPs: thread-level instruction counts x FLOPs per instruction (ncu's roofline: FMA = 2, half2 ops x2, HFMA2 x4).
VECTOR_FLOPS: dict[str, tuple[tuple[str, float], ...]] = {
    "fp64": (("dadd", 1), ("dmul", 1), ("dfma", 2)),
    "fp32": (("fadd", 1), ("fmul", 1), ("ffma", 2)),
    "fp16": (("hadd", 2), ("hmul", 2), ("hfma", 4)),
}
VECTOR_INST = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
VECTOR_PEAK = {"fp64": ("dfma", 2.0), "fp32": ("ffma", 2.0), "fp16": ("hfma", 4.0)}
# Tensor-core operations by input precision (ncu 2023+ ``sm__ops_path_tensor_*``; ops are FLOPs).
TENSOR_OPS: dict[str, tuple[str, ...]] = {
    "tensor_fp16": ("sm__ops_path_tensor_src_fp16.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"),
    "tensor_tf32": ("sm__ops_path_tensor_src_tf32_dst_fp32.sum",),
    "tensor_fp8": ("sm__ops_path_tensor_src_fp8.sum", "sm__ops_path_tensor_src_fp8_sparsity_off.sum",
                   "sm__ops_path_tensor_src_fp8_sparsity_on.sum"),
    "tensor_fp64": ("sm__ops_path_tensor_src_fp64.sum",),
}
# The same as flat (name, factor) lists, built once: the story reads them for every launch.
FLOP_TERMS: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = (
    *((prec, tuple((VECTOR_INST.format(op), float(k)) for op, k in ops)) for prec, ops in VECTOR_FLOPS.items()),
    *((prec, tuple((n, 1.0) for n in names)) for prec, names in TENSOR_OPS.items()),
)
# Peak per cycle: 2 x FMA (4 x HFMA2) thread instructions, tensor ops as counted (ncu's roofline sections).
PEAK_METRICS: tuple[tuple[str, str, float], ...] = (
    *((prec, VECTOR_INST.format(op) + ".peak_sustained", factor) for prec, (op, factor) in VECTOR_PEAK.items()),
    *((prec, names[0] + ".peak_sustained", 1.0) for prec, names in TENSOR_OPS.items()),
)
PRECISION_LABEL = {"fp64": "FP64", "fp32": "FP32", "fp16": "FP16", "tensor_fp16": "FP16/BF16 tensor",
                   "tensor_tf32": "TF32 tensor", "tensor_fp8": "FP8 tensor", "tensor_fp64": "FP64 tensor"}

# The collection flags that give the story its inputs.
COLLECT = "--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy " \
          "--section SpeedOfLight_RooflineChart"
