"""Issue #39 classes 2, 5 and 8: what the verdict counts, and what it says as context instead.

Each test runs a real corpus export, or a variant of one planted at test time, and fails without the mechanism:

- start-up that feeds the GPU's data path (managed memory the host fills before the first kernel, whose pages then
  migrate in) is the one-shot program's own host work, counted with the window's; without that premise it is not;
- several kinds of host work in one host-bound window (CPU work and MPI) are one cost, named part by part.
"""

from __future__ import annotations

from pathlib import Path

from analysis.api import analyze
from tests.analysis.planting import copy_export, ingest_copy, new_string, sqlite_rw
from tests.conftest import corpus_file

MS = 1_000_000


def _run(src: Path, out: Path) -> dict:
    return analyze([ingest_copy(src, out)]).to_json()


def test_start_up_filling_managed_memory_counts_only_when_its_pages_feed_the_kernels(tmp_path) -> None:
    """stdpar: 205 ms from the first CUDA call to the first kernel, in which the host reads its input into managed
    memory that the kernels then fault in (4,768 host-to-device migrations). The host-bound verdict counts it with
    the window's blocking writes. Planted: the same export with that allocation made a plain device allocation
    (cuMemAlloc): the premise fails and the verdict costs the window's host work alone."""
    base = _run(copy_export(corpus_file("stdpar-um-gpu.sqlite"), tmp_path / "a.sqlite"), tmp_path / "a.duckdb")
    v = base["verdict"]
    (host001,) = [f for f in base["findings"] if f["rule_id"] == "HOST001"]
    assert v["kind"] == "host_bound" and v["rule_id"] == "HOST001"
    con = sqlite_rw(corpus_file("stdpar-um-gpu.sqlite"))
    (startup,) = con.execute("""SELECT MIN(s) - (SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME) FROM (
                                    SELECT MIN(start) s FROM CUPTI_ACTIVITY_KIND_KERNEL
                                    UNION ALL SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_MEMCPY)""").fetchone()
    con.close()
    assert v["impact_ns"] == host001["impact_ns"] + startup  # first CUDA call to the first GPU operation
    assert "205 ms setting up CUDA and filling the managed memory" in v["text"]
    assert "4,768 migrations" in v["text"] and "pread64 22.7 ms" in v["text"], v["text"]

    src = copy_export(corpus_file("stdpar-um-gpu.sqlite"), tmp_path / "b.sqlite")
    con = sqlite_rw(src)
    with con:
        plain = new_string(con, "cuMemAlloc_v2")
        changed = con.execute("""UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE nameId IN
                                 (SELECT id FROM StringIds WHERE value LIKE 'cuMemAllocManaged%')""", [plain]).rowcount
    con.close()
    assert changed == 1
    planted = _run(src, tmp_path / "b.duckdb")["verdict"]
    assert planted["kind"] == "host_bound" and planted["impact_ns"] == host001["impact_ns"], planted
    assert "managed memory" not in planted["text"] and "of start-up" not in planted["text"]


def test_host_work_of_several_kinds_in_the_window_is_one_cost() -> None:
    """saxpy (MPI rank): between its copies the launching thread computes (CPU samples in main, std::abs) and
    sends and receives over MPI; both leave the GPU idle, one after the other. The host-bound verdict counts both,
    names each, and its next step removes both."""
    from tests.analysis.test_verdict_substance import _result

    result = _result("saxpy-mpi-rank0-perlmutter.sqlite")
    v = result["verdict"]
    own = {f["rule_id"]: f for f in result["findings"]}
    assert v["rule_id"] == "GPU001" and v["kind"] == "host_bound"
    assert v["impact_ns"] == own["GPU001"]["impact_ns"] + own["HOST003"]["impact_ns"]
    assert f"also {own['HOST003']['title']}" in v["text"] and "costs 719 ms together" in v["text"], v["text"]
    assert "main" in v["next_step"] and "MPI" in v["next_step"], v["next_step"]
