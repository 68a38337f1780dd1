"""NCU007: pipe utilization: matrix kernels that leave the tensor cores unused, and saturated pipes."""

from __future__ import annotations

import re
from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import SM_PCT, Launch, Metric

TENSOR_INST = Metric(("sm__inst_executed_pipe_tensor.sum", "sm__pipe_tensor_cycles_active.sum"))
FMA_PIPE = Metric(("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",))
FP_OPS = ("ffma", "fmul", "fadd", "hfma", "hmul", "hadd")
PIPE_PREFIX, PIPE_SUFFIX = "sm__pipe_", "_cycles_active.avg.pct_of_peak_sustained_active"
# Names of matrix-multiply and convolution kernels (cuBLAS/cuDNN/CUTLASS/Triton/PyTorch conventions).
MATRIX_NAME = re.compile(r"gemm|gemv|conv|matmul|mma|bmm|xmma|cutlass|fmha|flash|attention|dot", re.IGNORECASE)
# A tensor core does at least twice the FP32 FMA pipe's math per cycle on every architecture since Volta,
# so moving the FMA-pipe work onto it saves at least half of that time: a conservative estimate.
TENSOR_GAIN = 0.5


class PipeUtilization(NcuRule):
    """Pipe and tensor-core utilization.

    *Why it matters*: matrix math on the FP32 FMA pipe runs several times slower than on tensor cores;
    a pipe at its peak is the kernel's bottleneck.

    *How it is detected*: a kernel named like matrix work (GEMM, convolution, attention, MMA) that executes
    floating-point FMA/MUL/ADD instructions (``sm__sass_thread_inst_executed_op_{ffma,...}_pred_on.sum``)
    but no tensor instructions (``sm__inst_executed_pipe_tensor.sum`` = 0); speedup: half the time of the
    FMA pipe (``sm__pipe_fma_cycles_active``, else the SM throughput), since tensor cores do at least twice
    its math. A pipe at or above 80% of peak (``sm__pipe_*_cycles_active.avg.pct_of_peak_sustained_active``,
    ncu's HighPipeUtilization threshold) is reported as saturated; ncu gives no speedup for it.
    """

    id = "NCU007"
    name = "ncu.pipe-utilization"
    category = "compute"
    gain_role = "symptom"
    cause_order = None  # idle or saturated pipes
    summary = "Matrix kernels without tensor cores; saturated pipes"
    advice = (
        "Use TF32/FP16/BF16 tensor-core paths (``torch.backends.cuda.matmul.allow_tf32``, cuBLAS math "
        "modes, AMP); for a saturated pipe, move work to another pipe or cut instructions.")
    label = "Pipe utilization"
    call_level = True
    collect = ("--section ComputeWorkloadAnalysis --section InstructionStats --metrics sm__inst_executed_pipe_tensor.sum,"
               "sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__sass_thread_inst_executed_op_hfma_pred_on.sum")
    ncu_rules = ("HighPipeUtilization",)
    thresholds = {"saturated_pct": Threshold(80.0, "%", "a pipe at or above this share of peak is saturated",
                                             minimum=0.0, maximum=100.0)}

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        tensor = launch.get(TENSOR_INST)
        got = {op: launch.get(Metric((f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum",))) for op in FP_OPS}
        fp = {k: v for k, v in got.items() if v is not None}
        pipes = launch.matching(PIPE_PREFIX, PIPE_SUFFIX)
        if (tensor is None or not fp) and not pipes:
            return None
        hits = []
        if tensor is not None and fp and tensor == 0 and sum(fp.values()) > 0 and MATRIX_NAME.search(launch.name):
            share = launch.get(FMA_PIPE)
            share = share if share is not None else launch.get(SM_PCT)
            if share is not None:
                from analysis.diagnosis.ncu.limiter import limiter  # the limiter reads this package's metrics

                family = limiter(launch)["tensor_cores"]["family"]
                offer = f"; this GPU offers {family} tensor-core instructions" if family else ""
                hits.append(Hit("no_tensor", share * TENSOR_GAIN, "Matrix kernel without tensor cores",
                                f"{launch.short_name} executes {fmt.number(sum(fp.values()))} floating-point thread instructions "
                                f"and no tensor-core instructions; the FMA pipe is busy {fmt.pct(share)} of the time{offer}",
                                "Enable a tensor-core path: TF32 (torch.backends.cuda.matmul.allow_tf32=True, cuBLAS "
                                "CUBLAS_TF32_TENSOR_OP_MATH), FP16/BF16 with AMP, or a tensor-core GEMM library.",
                                {"tensor_instructions": tensor, "fp_thread_instructions": fp, "busy_pct": share}))
        for pipe, pct in sorted(pipes.items(), key=lambda kv: -kv[1]):
            if pct >= params["saturated_pct"]:
                hits.append(Hit(f"saturated_{pipe}", 0.0, f"Saturated {pipe} pipe",
                                f"The {pipe} pipe is busy {fmt.pct(pct)} of active cycles: it bounds the kernel",
                                "Move work to another pipe (e.g. FP32 to tensor cores, integer to FP), or execute "
                                "fewer instructions on it.", {"pipe": pipe, "utilization_pct": pct}))
                break
        return hits
