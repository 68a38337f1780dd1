"""Iterations of a report: the repeating NVTX range (a training step), with per-iteration GPU time and spread."""

from __future__ import annotations

import re
from typing import cast

from analysis import fmt
from analysis.model.nvtx_projection import projected_table
from analysis.model.trace import Trace
from analysis.report_types import NvtxIterations, NvtxStep, NvtxStepStats

MIN_ITERATIONS = 3
# A step range must hold at least this share of the report's GPU work: a repeating range holding
# less is an annotation of a part of the program, not of its iteration.
MIN_GPU_SHARE = 0.25
# Candidates within this share of the best one are a tie, which a step-like name breaks.
TIE_SHARE = 0.05
SLOWEST = 5

# Names people give their step ranges; only a tie-breaker between candidates of near-equal GPU share.
STEP_NAME = re.compile(r"step|iter|batch|epoch|train|forward", re.IGNORECASE)

# Library/framework ranges are never the step. By NVTX domain (case-insensitive; NCCL, MPI, CCCL
# (CUB/Thrust), the CUDA math libraries, TensorRT and its myelin runtime, NVSHMEM, UCX) ...
LIBRARY_DOMAIN = (r"^(nccl|rccl|mpi|cccl|cub|thrust|cublas\w*|cudnn\w*|cufft\w*|cusparse\w*|cusolver\w*"
                  r"|curand\w*|cutensor\w*|cutlass|tensorrt|myelin.*|nvshmem|ucx|ucp|nvfuser|dali)$")
# ... and by name, since cropped exports lose the domain-create rows (the name is all that is left):
# NCCL calls (``ncclGroupEnd``), CUB/Thrust/cuBLAS/cuDNN entry points, PyTorch op ranges (``aten::``,
# ``autograd::``, ``c10d::``, ``FSDP::``/``DDP::`` hooks, and every autograd op range of
# ``torch.autograd.profiler.emit_nvtx``, which carries a ``seq = N`` suffix: a user ``record_function``
# under emit_nvtx only gets ``op_id = N`` and stays a candidate, while a dispatcher op such as
# ``flash_attn::_flash_attn_forward, op_id = N`` does not), MPI_* and UCX calls.
LIBRARY_NAME = (r"^(nccl|rccl|MPI_|PMPI_|ucp_|uct_|UCX_)|^(cub|thrust|cublas\w*|cudnn\w*|cufft\w*|cutlass"
                r"|aten|autograd|c10d|c10|prim|profiler|torch|FSDP|DDP)::|^(cublas|cudnn)[A-Z_]|, seq = \d+"
                r"|^\w+::\w+, op_id = \d+$")

# One row per outermost instance of a repeating non-library range: no earlier-starting (or equal-start,
# longer) instance of any repeating range on its thread, library ones included, reaches its end (a user
# range inside a library op range is part of that op). The running MAX over the thread's ranges sorted by
# start is the set-based form of that containment test.
TOP_SQL = r"""
    WITH base AS (
        SELECT rid, pid, tid, start_ns, end_ns, domain, text, COALESCE(domain, '') AS dkey,
               regexp_replace(text, '[0-9]+', '#', 'g') AS name, gpu_start, gpu_end, gpu_ops, gpu_op_ns,
               regexp_matches(text, $lib_name) OR regexp_matches(lower(COALESCE(domain, '')), $lib_domain) AS lib
        FROM {proj} WHERE text IS NOT NULL
    ),
    repeating AS (SELECT dkey, name FROM base GROUP BY dkey, name HAVING COUNT(*) >= 2),
    inst AS (SELECT b.* FROM base b SEMI JOIN repeating r ON r.dkey = b.dkey AND r.name = b.name),
    swept AS (
        SELECT *, MAX(end_ns) OVER (PARTITION BY pid, tid ORDER BY start_ns, end_ns DESC, rid
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS outer_end
        FROM inst
    )
    SELECT * EXCLUDE (outer_end, lib) FROM swept WHERE NOT lib AND (outer_end IS NULL OR outer_end < end_ns)
"""

GPU_TOTAL_SQL = """
    SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM (
        SELECT start_ns, end_ns FROM kernels UNION ALL SELECT start_ns, end_ns FROM memcpy
        UNION ALL SELECT start_ns, end_ns FROM memset)
"""

ITEM_COLUMNS = """pid, tid, start_ns, end_ns, end_ns - start_ns AS wall, gpu_start, gpu_end,
                  COALESCE(gpu_end - gpu_start, 0) AS gpu, gpu_op_ns, gpu_ops"""


def _top_table(trace: Trace) -> str:
    from analysis.model.intervals import temp_table

    return temp_table(trace, "_gp_iter_top", TOP_SQL.format(proj=projected_table(trace)),
                      {"lib_name": LIBRARY_NAME, "lib_domain": LIBRARY_DOMAIN})


def _choose(cands: list[tuple], total_gpu: int) -> tuple | None:
    """The step among (dkey, name, count, gpu_op_ns, wall) candidates: largest GPU share, names break ties."""
    if total_gpu > 0:
        best = max(c[3] for c in cands)
        if best < MIN_GPU_SHARE * total_gpu:
            return None
        near = [c for c in cands if c[3] >= best - TIE_SHARE * total_gpu]
        return max(near, key=lambda c: (bool(STEP_NAME.search(c[1])), c[3], c[4], c[2], c[1]))
    # No GPU activity at all (an NVTX-only export): host time is the only measure left.
    best = max(c[4] for c in cands)
    near = [c for c in cands if c[4] >= (1.0 - TIE_SHARE) * best]
    return max(near, key=lambda c: (bool(STEP_NAME.search(c[1])), c[4], c[2], c[1]))


def _item(i: int, r: tuple) -> NvtxStep:
    return {"index": i, "pid": r[0], "tid": r[1], "start_ns": int(r[2]), "end_ns": int(r[3]), "cpu_ns": int(r[4]),
            "wall_ns": int(r[4]), "gpu_start_ns": None if r[5] is None else int(r[5]),
            "gpu_end_ns": None if r[6] is None else int(r[6]), "gpu_ns": int(r[7]), "gpu_op_ns": int(r[8]),
            "gpu_ops": int(r[9])}


def _spread(p10: float, p90: float, median: float) -> float | None:
    return round(100.0 * (p90 - p10) / median, 3) if median else None


def _clip(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[:n - 3] + "..."


def _no_step(trace: Trace, total_gpu: int, cands: list[tuple]) -> str:
    lib = trace.sql(f"""
        SELECT regexp_replace(text, '[0-9]+', '#', 'g') AS name, COUNT(*) AS n FROM {projected_table(trace)}
        WHERE text IS NOT NULL AND (regexp_matches(text, $n) OR regexp_matches(lower(COALESCE(domain, '')), $d))
        GROUP BY name ORDER BY n DESC, name LIMIT 3""", {"n": LIBRARY_NAME, "d": LIBRARY_DOMAIN})  # noqa: S608
    ignored = f" (library/framework ranges such as {', '.join(repr(_clip(r[0])) for r in lib)} are never the step)" if lib else ""
    if not cands:
        return (f"no NVTX range repeats {MIN_ITERATIONS}+ times at the outermost level{ignored}; "
                "annotate the training step with NVTX")
    best = max(cands, key=lambda c: c[3])
    return (f"no repeating NVTX range holds {fmt.exact(100 * MIN_GPU_SHARE)}% of the GPU work (the most: {_clip(best[1])!r} with "
            f"{fmt.pct(100.0 * best[3] / total_gpu)}){ignored}; annotate the training step with NVTX")


def iterations(trace: Trace, max_items: int = 500) -> NvtxIterations:
    """Per-iteration times from the repeating NVTX range that is the step.

    A range name is the NVTX domain plus the text with digit runs read as ``#`` (``Step 10 to 20`` and
    ``Step 20 to 30`` are one name). Candidates: names that repeat, are not library/framework ranges
    (``LIBRARY_DOMAIN`` / ``LIBRARY_NAME``: NCCL, MPI, CUB/Thrust (CCCL), cuBLAS/cuDNN/cuFFT..., TensorRT,
    PyTorch ``aten::``/``autograd::``/``c10d::`` and ``emit_nvtx`` op ranges), and have 3+ instances that
    are outermost: not inside an instance of another repeating candidate on the same thread. The step is
    the candidate holding the largest share of the report's GPU work (operation time launched inside
    its instances, see ``analysis.model.nvtx_projection``), at least 25%; a step-like name (step, iter, batch,
    epoch, train, forward) breaks ties within 5 points. Without GPU work, host time decides (ties within 5%).

    Returns ``{has_nvtx, range, range_example, domain, count, gpu_share_pct, items: [{index, pid, tid,
    start_ns, end_ns, cpu_ns, wall_ns, gpu_start_ns, gpu_end_ns, gpu_ns, gpu_op_ns, gpu_ops}], mean_ns,
    median_ns, min_ns, max_ns, p10_ns, p90_ns, stdev_ns, cv_pct, spread_pct, wall_median_ns, wall_min_ns,
    wall_max_ns, wall_spread_pct, slowest: [item], note, reason}``. ``gpu_ns`` is an iteration's projected
    GPU time (first to last operation it launched; 0 if none) and the unprefixed statistics are over it;
    ``wall_*`` are over host range durations. ``spread_pct`` is (p90 - p10) / median (None for a zero
    median), ``cv_pct`` stdev / mean. ``items`` (in time order) is capped at ``max_items``; ``slowest``
    holds the 5 iterations with the most GPU time (then wall time). Without NVTX or a step, ``range`` is
    None and ``reason`` says why.
    """
    empty: NvtxIterations = {"has_nvtx": trace.has_rows("nvtx"), "range": None, "domain": None, "count": 0,
                             "items": [], "slowest": []}
    if not empty["has_nvtx"]:
        return {**empty, "reason": "the report has no NVTX ranges; annotate the training step with NVTX"}
    top = _top_table(trace)
    total_gpu = int(trace.scalar(GPU_TOTAL_SQL))
    cands = trace.sql(f"""
        SELECT dkey, name, COUNT(*), SUM(gpu_op_ns), SUM(end_ns - start_ns) FROM {top}
        GROUP BY dkey, name HAVING COUNT(*) >= {MIN_ITERATIONS}""")  # noqa: S608
    chosen = _choose(cands, total_gpu) if cands else None
    if chosen is None:
        return {**empty, "reason": _no_step(trace, total_gpu, cands)}
    key = {"dkey": chosen[0], "name": chosen[1]}
    where = f"FROM {top} WHERE dkey = $dkey AND name = $name"
    s = trace.sql(f"""
        WITH t AS (SELECT end_ns - start_ns AS wall, COALESCE(gpu_end - gpu_start, 0) AS gpu,
                          domain, text {where})
        SELECT COUNT(*), AVG(gpu), MEDIAN(gpu::DOUBLE), MIN(gpu), MAX(gpu), QUANTILE_CONT(gpu::DOUBLE, 0.1),
               QUANTILE_CONT(gpu::DOUBLE, 0.9), STDDEV_POP(gpu), MEDIAN(wall::DOUBLE), MIN(wall), MAX(wall),
               QUANTILE_CONT(wall::DOUBLE, 0.1), QUANTILE_CONT(wall::DOUBLE, 0.9), MIN(text), MAX(text),
               ANY_VALUE(domain) FROM t""", key)[0]  # noqa: S608
    items = [_item(i, r) for i, r in enumerate(trace.sql(
        f"SELECT {ITEM_COLUMNS} {where} ORDER BY start_ns, pid, tid LIMIT {int(max_items)}", key))]
    slowest = trace.sql(f"""
        SELECT ROW_NUMBER() OVER (ORDER BY start_ns, pid, tid) - 1 AS idx, {ITEM_COLUMNS} {where}
        ORDER BY gpu DESC, wall DESC, start_ns LIMIT {SLOWEST}""", key)
    # AVG and STDDEV_POP sum doubles in an order DuckDB's threads choose: round away the last bits so the
    # same steps always give the same figures (0.1 ns is far below any meaning).
    mean, stdev = round(float(s[1]), 1), round(float(s[7]), 1)
    return {
        "has_nvtx": True, "range": s[13] if s[13] == s[14] else chosen[1], "range_example": s[13],
        "domain": s[15], "count": int(s[0]),
        "gpu_share_pct": round(100.0 * chosen[3] / total_gpu, 3) if total_gpu else None,
        "items": items, "slowest": [_item(int(r[0]), r[1:]) for r in slowest],
        "mean_ns": mean, "median_ns": float(s[2]), "min_ns": int(s[3]), "max_ns": int(s[4]),
        "p10_ns": float(s[5]), "p90_ns": float(s[6]), "stdev_ns": stdev,
        "cv_pct": round(100.0 * float(s[7]) / float(s[1]), 3) if mean else 0.0, "spread_pct": _spread(s[5], s[6], s[2]),
        "wall_median_ns": float(s[8]), "wall_min_ns": int(s[9]), "wall_max_ns": int(s[10]),
        "wall_spread_pct": _spread(s[11], s[12], s[8]),
        "note": None if total_gpu else "the report has no GPU activity: only host (wall) times are known",
        "reason": None,
    }


def compact(it: NvtxIterations) -> NvtxStepStats:
    """The iteration summary without the per-iteration list (for the CLI JSON); ``slowest`` stays (bounded)."""
    return cast("NvtxStepStats", {k: v for k, v in it.items() if k != "items"})
