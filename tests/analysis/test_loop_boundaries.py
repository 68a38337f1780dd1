"""Where a kernel-pattern loop's iterations start and how many there are (issue #39, class 4): N steps are N
iterations, the first and the last one too.

The anchor of a loop without NVTX is any operation that occurs once per iteration, often in the middle of
the step (a time step's reduction, the kernel between a step's copies). Iterations that open there cut the
first step in two and leave the last one too short to count, so N steps came out as N - 1 iterations
starting mid-step. Each count below is the export's own, by SQL on the raw export (the kernel the labels
count once per step), and the first iteration starts with the step's first operation.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from analysis.loops.loop_report import loop_list
from analysis.loops.phases import find_loop
from analysis.model.trace import Trace
from tests.analysis.planting import (
    GPU_TABLES,
    clone_row,
    copy_export,
    has_table,
    ingest_copy,
    ingested,
    sqlite_rw,
)
from tests.analysis.planting import corpus_rows as _raw
from tests.conftest import corpus_file

MS = 1_000_000


def _kernels_named(short: str, like: str, column: str = "shortName") -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in _raw(short, f"""
        SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.{column}
        WHERE s.value LIKE '{like}' ORDER BY k.start""")]  # noqa: S608 - constants


def _loops(short: str) -> list[dict]:
    trace = Trace(ingested(corpus_file(short)), short)
    try:
        return [x.to_json() for x in loop_list(find_loop(trace))]
    finally:
        trace.close()


def test_saxpy_five_steps_are_five_iterations_from_the_first_copy() -> None:
    """saxpy-mpi: each step copies x and y in, runs saxpy, copies y back. The anchor is one of them; the
    iteration opens with the step's first copy, so the fifth step (whose copy back ends the GPU work) counts."""
    short = "saxpy-mpi-rank0-perlmutter.sqlite"
    saxpy = _kernels_named(short, "saxpy%")
    copies = _raw(short, "SELECT start, \"end\", copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start")
    assert len(saxpy) == 5 and len(copies) == 15
    (loop,) = _loops(short)
    assert loop["count"] == len(saxpy)
    assert loop["start_ns"] == copies[0][0] and copies[0][2] == 1  # the first host-to-device copy
    assert loop["end_ns"] == copies[-1][1]                          # the last step's copy back
    # Start to next start (the first copy of one step to the first copy of the next; the last step to its
    # own end).
    firsts = [c[0] for c in copies[::3]]
    times = [b - a for a, b in zip(firsts, firsts[1:], strict=False)] + [copies[-1][1] - firsts[-1]]
    assert loop["median_ns"] == statistics.median(times)


def test_cloverleaf_ten_steps_are_five_two_step_periods_from_the_step_start() -> None:
    """cloverleaf: the kernel sequence repeats every two hydro timesteps (test_loops_labels argues it); each
    timestep runs calc_dt once. The ten timesteps are five whole periods, and the first one opens with the
    first timestep's first kernel (ideal_gas, after the set-up's field_summary), not in its middle."""
    short = "cloverleaf-devsync.sqlite"
    calc_dt = _kernels_named(short, "%calc_dt%", "demangledName")
    summaries = _kernels_named(short, "%field_summary%", "demangledName")
    assert len(calc_dt) == 10
    (loop,) = _loops(short)
    assert 2 * loop["count"] == len(calc_dt)
    # The first period starts after the set-up's field summary and before the first timestep's calc_dt.
    setup_summary = max(s for s in summaries if s[0] < calc_dt[0][0])
    assert setup_summary[1] < loop["start_ns"] < calc_dt[0][0]
    first = _raw(short, f"""SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                            WHERE k.start = {loop['start_ns']}""")  # noqa: S608 - integers
    assert "ideal_gas" in first[0][0]
    # The last period holds the tenth calc_dt; the final field summary after the loop is not in it.
    assert loop["start_ns"] < calc_dt[-1][0] < loop["end_ns"] < summaries[-1][0]


@pytest.mark.parametrize(("short", "kernels"), [
    ("openmp-offload-t4.sqlite", ["nvkernel_solve_F1L204_2"]),
    ("clue-um-t4.sqlite", ["kernel_calculate_density", "kernel_calculate_densityTile"]),
])
def test_one_iteration_per_step_kernel(short: str, kernels: list[str]) -> None:
    """The labels count these loops by a kernel that runs once per step: Goodput's loops count the same."""
    counts = [len(_kernels_named(short, k)) for k in kernels]
    assert [x["count"] for x in _loops(short)] == counts


def _plant_launch_and_read(path: Path, n: int, copy_kind: int, size: int) -> list[int]:
    """Replace the export's GPU work by ``n`` iterations of one kernel launch then a small device-to-host read
    (``copy_kind``: 2 a copy, 12 a unified-memory page the host faults in), with host time of varying
    length between iterations (the host decides on the value it read). Returns the iterations' starts."""
    con = sqlite_rw(path)
    kernel = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()[0]
    copy = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? LIMIT 1", [copy_kind]).fetchone()[0]
    t = max(int(con.execute(f'SELECT MAX("end") FROM "{x}"').fetchone()[0] or 0)  # noqa: S608 - constants
            for x in GPU_TABLES if has_table(con, x)) + 50 * MS
    rng, starts = random.Random(n), []
    with con:
        for table in GPU_TABLES:
            if has_table(con, table):
                con.execute(f"DELETE FROM {table} WHERE rowid NOT IN ({kernel}, {copy})")  # noqa: S608 - integers
        for _ in range(n):
            starts.append(t)
            clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", kernel, start=t, end=t + 30_000)
            clone_row(con, "CUPTI_ACTIVITY_KIND_MEMCPY", copy, start=t + 35_000, end=t + 37_000, bytes=size)
            t += 37_000 + int(200_000 * (1 + 3 * rng.random()))
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = {kernel}")  # noqa: S608 - integers
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid = {copy}")  # noqa: S608 - integers
    con.close()
    return starts


@pytest.mark.parametrize(("base", "n", "copy_kind", "size"), [
    ("cloverleaf-devsync.sqlite", 4, 2, 8),          # a launch and an 8-byte cudaMemcpy back, 4 times
    ("devsync-heavy-report13.sqlite", 6, 12, 4096),  # a launch and a flag read through a page fault, 6 times
])
def test_a_launch_and_a_small_read_every_iteration_is_a_loop(tmp_path, base: str, n: int, copy_kind: int,
                                                            size: int) -> None:
    """Class 4: host-paced iterations of one launch and a small synchronous read are a loop, each iteration
    from its launch. A fault read is the driver's migration, not a launched operation, so such iterations are
    single launches and need five repeats (``analysis.loops.signatures.min_repeats``)."""
    src = copy_export(corpus_file(base), tmp_path / "read.sqlite")
    starts = _plant_launch_and_read(src, n, copy_kind, size)
    trace = Trace(ingest_copy(src, tmp_path / "read.duckdb"), "read")
    try:
        loop = find_loop(trace)
        assert loop.starts.tolist() == starts
    finally:
        trace.close()
