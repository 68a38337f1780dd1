"""KRN002: GEMM and convolution kernels that run on the FP32 SIMT pipes of a GPU that has tensor cores."""

from __future__ import annotations

import re
from collections import Counter

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.model.trace import Run, Trace
from analysis.readers import ToolKind
from analysis.results import TensorCoreExtra

# FP32 GEMM/convolution kernels of NVIDIA's libraries that run on the SIMT (CUDA core) pipes:
# cuBLAS ``<arch>_sgemm_*`` and ``gemmSN_*_kernel<float>``/``gemmk1_kernel<float>``, cuDNN
# ``implicit/explicit/precomputed_convolve_sgemm`` and ``<arch>_scudnn_*`` (including Winograd),
# CUTLASS ``cutlass_simt_sgemm`` and templates with ``OpClassSimt`` on float.
SIMT_FP32_RE = re.compile(
    r"sgemm|scudnn|gemmsn_\w+_kernel<float|gemmk1_kernel<float|opclasssimt.*float|float.*opclasssimt",
    re.IGNORECASE)
# Names that say tensor cores (MMA shapes, tensor-op classes, reduced-precision types): never flagged.
TENSOR_CORE_RE = re.compile(r"tensorop|tf32|hmma|wgmma|imma|s884|s1688|s16816|h884|h1688|h16816|bf16|f16|half",
                            re.IGNORECASE)


def simt_fp32_names(trace: Trace) -> list[str]:
    """The distinct compute kernel names of the report that are FP32 SIMT GEMMs/convolutions (cached)."""
    names = trace.memo.get("simt_fp32_names")
    if names is None:
        distinct = [r[0] for r in trace.sql(
            "SELECT DISTINCT name FROM kernels WHERE category = 'compute' AND name IS NOT NULL")]
        names = sorted(n for n in distinct if SIMT_FP32_RE.search(n) and not TENSOR_CORE_RE.search(n))
        trace.memo["simt_fp32_names"] = names
    return names


# A name that says matrix work, for kernels an ncu report shows on the FP32 pipes (generated kernels such as
# Triton's ``triton_tem_fused_mm_0`` or ``triton_bmm`` included).
MATRIX_RE = re.compile(r"gemm|gemv|conv|matmul|mma|xmma|cutlass|fmha|attention|dot|(^|_)b?mm(_|$)", re.IGNORECASE)
TENSOR_INST = ("sm__inst_executed_pipe_tensor.sum", "sm__pipe_tensor_cycles_active.sum",
               "sm__inst_executed_pipe_tensor_op_hmma.sum", "sm__pipe_tensor_op_hmma_cycles_active.sum")
FP32_INST = ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
             "sm__sass_thread_inst_executed_op_fadd_pred_on.sum")
FMA_PIPE_PCT = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"


def ncu_pipe_verdicts(run: Run) -> dict[str, dict]:
    """What the run's ncu reports measured of each kernel's math pipes, by the kernel name ncu exported.

    ``verdict`` is ``tensor`` when any profiled launch executed tensor-pipe instructions, ``fp32`` when the
    launches executed FP32 FMA/MUL/ADD instructions and no tensor-pipe ones; kernels without the tensor-pipe
    metric get no verdict. Values are sums over the kernel's profiled launches.
    """
    from analysis.model.ncu_metrics import load_launches  # only when an ncu report is in the run

    out: dict[str, dict] = {}
    for trace in run.of_tool(ToolKind.NCU):
        for launch in load_launches(trace):
            tensor = [launch.raw.get(m) for m in TENSOR_INST if launch.raw.get(m) is not None]
            if not tensor:
                continue
            fp32 = sum(launch.raw.get(m) or 0.0 for m in FP32_INST)
            # Keyed by the name ncu exported: a demangled signature, or a base name when ncu printed those
            # (check_report takes a base name only for an nsys kernel that alone has it).
            for key in {launch.name} - {""}:
                v = out.setdefault(key, {"tensor_inst": 0.0, "fp32_inst": 0.0, "launches": 0, "report": trace.label,
                                         "fma_pipe_pct": None})
                v["tensor_inst"] += tensor[0]
                v["fp32_inst"] += fp32
                v["launches"] += 1
                fma = launch.raw.get(FMA_PIPE_PCT)
                if fma is not None:
                    v["fma_pipe_pct"] = max(fma, v["fma_pipe_pct"] or 0.0)
    for v in out.values():
        v["verdict"] = "tensor" if v["tensor_inst"] > 0 else "fp32" if v["fp32_inst"] > 0 else None
    return out


def name_list(names: list[str]) -> str:
    """A SQL IN-list of names (quotes doubled), or NULL when empty (``x IN (NULL)`` matches nothing)."""
    return ", ".join("'" + n.replace("'", "''") + "'" for n in names) or "NULL"


class TensorCoresIdle(Rule):
    """Tensor cores left idle: matrix multiplies and convolutions run in FP32 on the CUDA cores.

    *Why it matters*: since Volta (compute capability 7.0) GPUs multiply matrices on tensor cores,
    in FP16 (and from Ampere, 8.0, also BF16 and TF32) many times faster than the FP32 CUDA cores:
    an A100 does 19.5 TFLOPS in FP32, 156 in TF32 and 312 in BF16. A GEMM or convolution that runs
    a plain FP32 kernel leaves that capacity idle.

    *How it is detected*: by the names NVIDIA's libraries give their kernels (kernel names are all
    an nsys export says about the math pipe). FP32 SIMT kernels: cuBLAS ``*_sgemm_*``,
    ``gemmSN_*_kernel<float>``, ``gemmk1_kernel<float>``; cuDNN ``implicit/explicit/
    precomputed_convolve_sgemm`` and ``*_scudnn_*`` (Winograd included); CUTLASS ``cutlass_simt_sgemm``
    and ``OpClassSimt`` on float. A name with a tensor-core marker (``tensorop``, ``tf32``, ``hmma``,
    ``wgmma``, MMA shapes like ``s1688``/``s16816``/``h884``, ``f16``/``bf16``) is never flagged.
    Only devices with tensor cores count (compute capability 7.0 or later, or unknown). Not
    detected: FP64 GEMMs (cuBLAS uses FP64 tensor cores by itself where they exist, 8.0 and 9.0),
    and FFT-based convolutions. When the run has an ncu report of the same kernels (matched by demangled
    or short name), the measured pipes decide: a kernel whose profiled launches executed tensor-pipe
    instructions (``sm__inst_executed_pipe_tensor.sum``, ``sm__pipe_tensor_cycles_active.sum``) is
    never flagged, whatever its name; one that executed FP32 FMA/MUL/ADD instructions
    (``sm__sass_thread_inst_executed_op_{ffma,fmul,fadd}_pred_on.sum``) and no tensor-pipe ones is
    flagged when its name says matrix work (``gemm``, ``conv``, ``matmul``, ``mm``, ``bmm``, ``dot`` ...:
    Triton and other generated kernels, whose names do not carry the data type). NCU007 reports the
    same ncu measurement per profiled kernel with ncu's speedup; KRN002 states the nsys time at stake. Impact: the GPU time of the flagged kernels (the
    time at stake), reported when it is at least ``min_share_pct`` of compute kernel time and at least
    ``min_time_us``.

    Ownership: kernel time, never idle or memory-only time. KRN003 (duration outliers) leaves these
    kernels out, so the two never count the same kernel.
    """

    id = "KRN002"
    extra_type = TensorCoreExtra
    name = "kernel.tensor-cores-idle"
    verdict_kind = "gpu_bound_kernel"
    next_step = "use tensor-core math (TF32/BF16/FP16) in the heavy kernels"
    reads_tools = ("ncu",)
    category = "kernel"
    requires = ("kernels",)
    thresholds = {
        "min_share_pct": Threshold(1.0, "%", "report when FP32 SIMT GEMMs/convolutions are at least this share of "
                                             "compute kernel time", minimum=0.0, maximum=100.0),
        "min_time_us": Threshold(1000.0, "us", "report when their time adds up to at least this",
                                 minimum=0.0, maximum=MAX_US),
    }
    summary = "GEMMs and convolutions on FP32 CUDA cores while tensor cores idle"
    advice = (
        "On Ampere and later allow TF32 (PyTorch ``torch.backends.cuda.matmul.allow_tf32 = True``, "
        '``torch.backends.cudnn.allow_tf32 = True`` or ``torch.set_float32_matmul_precision("high")``; '
        "cuBLAS ``CUBLAS_TF32_TENSOR_OP_MATH``); train in mixed precision (``torch.autocast`` with BF16 "
        "or FP16); keep GEMM dimensions and channel counts multiples of 8 (FP16/BF16) so the tensor-core "
        "kernels apply.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        by_naming = simt_fp32_names(trace)
        names, measured = list(by_naming), {}
        if ctx.run.of_tool(ToolKind.NCU):
            verdicts = self.__dict__.get("_verdicts")
            if verdicts is None:  # once per rule run, not once per nsys report
                verdicts = self.__dict__["_verdicts"] = ncu_pipe_verdicts(ctx.run)
            distinct = [r[0] for r in trace.sql("SELECT DISTINCT name FROM kernels WHERE category = 'compute' "
                                                "AND name IS NOT NULL")]
            short = dict(trace.sql("SELECT name, any_value(short_name) FROM kernels WHERE category = 'compute' "
                                   "AND name IS NOT NULL GROUP BY name"))
            shared = Counter(short.values())
            for n in distinct:
                # Two instantiations of one template share a short name: it identifies a kernel only when
                # one nsys kernel has it (and ncu exported base names, so its key is that short name).
                v = verdicts.get(n) or (verdicts.get(short.get(n) or "") if shared[short.get(n)] == 1 else None)
                if v is None or v["verdict"] is None:
                    continue
                measured[n] = v
            # Measured pipes beat names: a kernel ncu saw on the tensor pipe is never flagged, one it saw on
            # the FP32 pipes only is flagged when its name says matrix work (Triton and other generated names).
            names = sorted({n for n in names if measured.get(n, {}).get("verdict") != "tensor"}
                           | {n for n, v in measured.items() if v["verdict"] == "fp32" and MATRIX_RE.search(n)})
        if not names:
            return []
        # Devices without tensor cores (compute capability under 7.0) are left out; unknown ones count.
        old = {(r[0], r[1]) for r in trace.sql("SELECT pid, device FROM devices WHERE cc_major < 7")}
        rows = trace.sql(f"""
            SELECT pid, device, name, COUNT(*), SUM(end_ns - start_ns) FROM kernels
            WHERE category = 'compute' AND end_ns >= start_ns AND name IN ({name_list(names)})
            GROUP BY ALL ORDER BY 5 DESC, name""")  # noqa: S608 - names quoted
        rows = [r for r in rows if (r[0], r[1]) not in old and (None, r[1]) not in old]
        total = sum(int(r[4]) for r in rows)
        compute = int(trace.scalar("SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM kernels "
                                   "WHERE category = 'compute' AND end_ns >= start_ns") or 0)
        share = pct(total, compute)
        if not rows or share is None or share < ctx.params["min_share_pct"] or total < ctx.params["min_time_us"] * 1000:
            return []
        cc = trace.sql("SELECT MIN(cc_major) FROM devices WHERE cc_major IS NOT NULL")[0][0]
        top = trace.sql(f"""
            SELECT pid, device, stream, start_ns, end_ns, name FROM kernels
            WHERE category = 'compute' AND end_ns >= start_ns AND name IN ({name_list([r[2] for r in rows])})
            ORDER BY end_ns - start_ns DESC, start_ns LIMIT 20""")  # noqa: S608 - names quoted
        nvtx = nvtx_at(trace, [(r[0], r[3]) for r in top])
        evidence = tuple(Evidence(start_ns=int(r[3]), end_ns=int(r[4]), device=r[1], stream=r[2], pid=r[0],
                                  rank=trace.rank, name=r[5], nvtx=n, value_ns=int(r[4]) - int(r[3]))
                         for r, n in zip(top, nvtx, strict=True))
        n_kernels = sum(int(r[3]) for r in rows)
        by_name: dict[str, list[int]] = {}
        for r in rows:
            acc = by_name.setdefault(r[2], [0, 0])
            acc[0] += int(r[3])
            acc[1] += int(r[4])
        tf32 = cc is None or cc >= 8
        advice = (("Allow TF32 (torch.backends.cuda.matmul.allow_tf32 / cudnn.allow_tf32, or "
                   "torch.set_float32_matmul_precision('high')); " if tf32 else
                   "This GPU has FP16 tensor cores but no TF32: ")
                  + "use mixed precision (torch.autocast with BF16/FP16) and keep GEMM dimensions and channel "
                    "counts multiples of 8 so tensor-core kernels apply.")
        return [Finding(
            rule_id=self.id,
            title=f"Tensor cores idle: {fmt.count(n_kernels)} FP32 GEMM/convolution kernel(s) on CUDA cores, {fmt_ms(total)}",
            message=(f"{fmt.count(n_kernels)} GEMM/convolution kernel(s) ran in FP32 on the CUDA cores for {fmt_ms(total)}, "
                     f"{fmt.pct(share)} of compute kernel time; largest: "
                     + ", ".join(f"{n} x{fmt.count(v[0])} ({fmt_ms(v[1])})"
                                 for n, v in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:3]) + "."),
            impact_ns=total, impact_pct=pct(total, report_span_ns(trace)), advice=advice,
            evidence=evidence, evidence_total=n_kernels, report=trace.label, rank=trace.rank,
            extra=TensorCoreExtra(
                kernels=n_kernels, compute_share_pct=round(share, 3),
                ncu={n: {"verdict": v["verdict"], "tensor_inst": v["tensor_inst"], "fp32_inst": v["fp32_inst"],
                         "fma_pipe_pct": v["fma_pipe_pct"], "launches": v["launches"], "report": v["report"],
                         "named_fp32": n in by_naming} for n, v in sorted(measured.items())} if measured else None,
                by_name={n: {"count": v[0], "total_ns": v[1]}
                         for n, v in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:20]}),
        )]
