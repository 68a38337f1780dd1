"""Issue #39 class 3: premises as part of the rule contract (docs/rules.md).

KRN004 (launch shape) may lead the verdict only when the kernel's duration grows as its grid shrinks. Planted on a
real export whose verdict is the launch shape (a30-mig: nussinov_gpu, one block on a 28-SM slice): the same kernel
launched again with a grid of 120 blocks and the same duration. Then the grid is shown not to limit it: KRN004 says
so ("grid 1-120 blocks, duration flat: not grid-bound"), and the verdict does not lead with the launch shape. With
the wide launch 100 times faster, the premise holds and the launch shape leads again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import analyze
from tests.analysis.planting import api, clone_row, copy_export, ingest_copy, kernel, normalized, sqlite_rw
from tests.conftest import corpus_file

EXPORT = "a30-mig.sqlite"


def _wide_launch(path: Path, speedup: float) -> None:
    """A second launch of the export's kernel, 120 blocks wide, right after the first; ``speedup``: how many times
    faster it runs than the 1-block launch."""
    con = sqlite_rw(path)
    with con:
        rowid, start, end = con.execute('SELECT rowid, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        dur = int((end - start) / speedup)
        clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid, start=end + 1000, end=end + 1000 + dur, gridX=120)
    con.close()


@pytest.mark.parametrize(("speedup", "holds"), [(1.0, False), (100.0, True)], ids=["flat", "grid-bound"])
def test_the_launch_shape_leads_only_when_its_premise_holds(tmp_path, speedup, holds) -> None:
    src = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    _wide_launch(src, speedup)
    result = analyze([ingest_copy(src, tmp_path / "a.duckdb")]).to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "KRN004"]
    assert f["premise_holds"] is holds and f["premise"].startswith("grid 1-120 blocks"), f["premise"]
    v = result["verdict"]
    if holds:
        assert "the grid limits it" in f["premise"] and v["kind"] == "launch_shape", v
    else:
        assert "duration flat" in f["premise"] and "not grid-bound" in f["title"]
        assert v["kind"] != "launch_shape" and v["rule_id"] != "KRN004", v


def test_one_grid_size_says_what_the_premise_rests_on() -> None:
    from tests.analysis.test_verdict_substance import _result
    (f,) = [x for x in _result(EXPORT)["findings"] if x["rule_id"] == "KRN004"]
    assert f["premise_holds"] is True and f["premise"].startswith("one grid size")
    assert "Premise (the kernel's duration grows as its grid shrinks): holds" in f["message"]


def _kernel_first(path: Path) -> None:
    """unified-memory-a100 with its kernel done (1 µs) before the first migration: the migrations then run with
    no kernel, and between the 1,536 migrations back to the host the launching thread is on the CPU (its own
    work) for all but 10.0 ms. The kernel's row stays, so its thread still names the launching thread."""
    con = sqlite_rw(path)
    with con:
        (first,) = con.execute("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ?, "end" = ?', [first - 2000, first - 1000])
    con.close()


@pytest.mark.parametrize("planted", [False, True], ids=["as-recorded", "kernel-first"])
def test_unified_memory_idle_is_only_the_wait_on_migrations(tmp_path, planted) -> None:
    """MEM004 counts the migrations in flight and the idle the host waited on them (switched out), never the
    idle between them while the host ran its own work (issue #39: 592 ms painted around 12.8 ms of
    migrations). As recorded, 19,766 migrations run inside the kernel: the premise holds on them. With the
    kernel done before them nothing but the 10.0 ms wait supports it: the premise fails and the verdict does
    not lead with it."""
    src = copy_export(corpus_file("unified-memory-a100.sqlite"), tmp_path / "u.sqlite")
    if planted:
        _kernel_first(src)
    result = analyze([ingest_copy(src, tmp_path / "u.duckdb")]).to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "MEM004"]
    assert f["idle_ns"] == f["idle_waited_ns"] and f["impact_ns"] == f["idle_ns"] + f["in_flight_ns"]
    if planted:  # the idle between the kernel's former migrations joins in; the host is on the CPU in most of it
        assert 2 * f["idle_waited_ns"] < f["idle_between_ns"]
        assert f["premise_holds"] is False and "not migration-bound" in f["title"], f["title"]
        assert f["in_kernel_migrations"] == 0 and result["verdict"]["rule_id"] != "MEM004", result["verdict"]
    else:
        assert f["idle_between_ns"] / 1e6 == pytest.approx(591.9, abs=0.1)
        assert f["idle_waited_ns"] / 1e6 == pytest.approx(10.0, abs=0.01)  # the thread off CPU between migrations
        assert "ran on the CPU 582 ms (its own work or other calls), not counted" in f["premise"]
        assert f["premise_holds"] is True and f["in_kernel_migrations"] == 19766
        # In flight: the union of the raw export's migration rows (all its copies are migrations), by plain SQL.
        con = sqlite_rw(src)
        rows = con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start').fetchall()
        con.close()
        union, reach = 0, None
        for a, z in rows:
            if reach is None or a > reach:
                union, reach = union + z - a, z
            elif z > reach:
                union, reach = union + z - reach, z
        assert f["in_flight_ns"] == union and union / 1e6 == pytest.approx(71.226, abs=0.001)  # the label's memory_ms


MS_NS = 1_000_000


def _held_trace(path: Path, call: str, kind: str) -> Path:
    """A planted run: kernel, then 10 ms of GPU idle while the launching thread sits in ``call`` (a memset on
    managed memory, or a copy from pinned or pageable memory, the GPU operation at its end), then a kernel."""
    op = {"device": 0, "stream": 7, "pid": 1, "tid": 1, "start_ns": 11 * MS_NS, "end_ns": 11 * MS_NS + 50_000,
          "correlation_id": 2, "bytes": 64 << 20}
    # The result read back asynchronously into pinned memory at the end (MEM002 reads copies: a run has some).
    back = {**op, "start_ns": 13 * MS_NS, "end_ns": 13 * MS_NS + 10_000, "correlation_id": 4, "copy_kind": "DtoH",
            "src_kind": "device", "dst_kind": "pinned"}
    ops = ({"memset": [{**op, "value": 0, "mem_kind": kind}], "memcpy": [back]} if "Memset" in call else
           {"memcpy": [{**op, "copy_kind": "HtoD", "src_kind": kind, "dst_kind": "device"}, back]})
    return normalized(path, kernels=[kernel(0, MS_NS, corr=1), kernel(12 * MS_NS, 13 * MS_NS, corr=3)],
                      cuda_api=[api(0, 10_000, "cudaLaunchKernel", corr=1), api(MS_NS, 11 * MS_NS + 60_000, call, corr=2),
                                api(12 * MS_NS - 10_000, 12 * MS_NS, "cudaLaunchKernel", corr=3),
                                api(12 * MS_NS, 12 * MS_NS + 5_000, "cudaMemcpyAsync", corr=4)], **ops)


@pytest.mark.parametrize(("call", "kind", "pinned"), [("cudaMemset", "managed", False), ("cudaMemcpy", "pinned", False),
                                                      ("cudaMemcpy", "pageable", True)],
                         ids=["managed-memset", "pinned-copy", "pageable-copy"])
def test_pinned_advice_only_for_pageable_copies(tmp_path, call, kind, pinned) -> None:
    """Issue #39 class 3: MEM002 owns the idle inside a call that held the host; it advises pinned memory only
    when that call's copies move pageable memory. A blocking memset on managed memory is not a pageable copy."""
    result = analyze([_held_trace(tmp_path / "h.duckdb", call, kind)]).to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "MEM002"]
    assert f["idle_ns"] >= 9 * MS_NS and f["pinned_advice"] is pinned, f["message"]
    assert ("from pinned memory" in f["advice"]) is pinned, f["advice"]
    if call == "cudaMemset":
        assert "is not a pageable copy" in f["message"] and "not a copy" in f["advice"]
    elif not pinned:
        assert "none of the 1 copies of those calls moves pageable host memory" in f["message"]
    v = result["verdict"]
    assert v["rule_id"] == "MEM002" and ("from pinned memory" in v["next_step"]) is pinned, v
