"""The verdict follows what the host was doing, not a precedence of rules: the same real export, the same gap
opened in the middle of its loop (2 s, three times the idle the export has), and only what the launching thread
did during it differs. Each time the verdict names that cause, with the rule that owns that idle and its cost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from analysis.api import analyze
from tests.analysis.planting import clone_row, copy_export, ingest_copy, new_string, open_gap, sqlite_rw
from tests.analysis.rule_cases_idle import host003_fires, loop_gap, plant_api, plant_os_call
from tests.conftest import corpus_file

EXPORT = "cupy-power-iteration.sqlite"  # host-bound loop (CPU-sampled text output), NVTX and OS runtime traced
GAP = 2_000_000_000


def _nothing(path: Path) -> int:
    open_gap(path, loop_gap(path), GAP)
    return GAP


PLANTS: list[tuple[str, Callable[[Path], int], str, str]] = [
    ("cudaMallocPitch", lambda p: plant_api(p, "cudaMallocPitch_v3020", GAP), "allocation", "MEM006"),
    ("cuModuleLoadData", lambda p: plant_api(p, "cuModuleLoadData", GAP), "jit", "HOST004"),
    ("cudaDeviceSynchronize", lambda p: plant_api(p, "cudaDeviceSynchronize_v3020", GAP), "sync_bound", "SYNC001"),
    ("cudaMemcpy", lambda p: plant_api(p, "cudaMemcpy_v3020", GAP), "copies", "MEM002"),
    ("MPI_Recv range", lambda p: host003_fires(p, None, GAP), "communication", "HOST003"),
    ("read", lambda p: plant_os_call(p, "read", GAP), "host_bound", "HOST001"),
    ("pthread_cond_wait", lambda p: plant_os_call(p, "pthread_cond_wait", GAP), "host_bound", "HOST001"),
]


@pytest.mark.parametrize(("what", "plant", "kind", "rule"), PLANTS, ids=[p[0] for p in PLANTS])
def test_the_verdict_names_what_the_host_did_in_the_gap(tmp_path, what, plant, kind, rule) -> None:
    src = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    planted = plant(src)
    result = analyze([ingest_copy(src, tmp_path / "a.duckdb")], window="all").to_json()
    v = result["verdict"]
    assert (v["kind"], v["rule_id"]) == (kind, rule), v
    (f,) = [x for x in result["findings"] if x["rule_id"] == rule]
    # The rule owns the planted call's idle (the whole opened gap) and at most what else the export has of it. A
    # host-bound verdict also counts the other host work it names ("also ...": the export's own CPU-sampled gaps).
    assert planted <= f["impact_ns"] < planted + 50_000_000
    also = [x for x in result["findings"] if x is not f and f"also {x['title']}" in v["text"]]
    assert v["impact_ns"] == f["impact_ns"] + sum(x["impact_ns"] for x in also)
    assert not also or kind == "host_bound"


def test_a_gap_with_nothing_recorded_stays_gpu001s_host_bound_idle(tmp_path) -> None:
    src = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    _nothing(src)
    result = analyze([ingest_copy(src, tmp_path / "a.duckdb")], window="all").to_json()
    v = result["verdict"]
    assert (v["kind"], v["rule_id"]) == ("host_bound", "GPU001"), v
    (g,) = [x for x in result["findings"] if x["rule_id"] == "GPU001"]
    # No call, sample or switch-out in it, but the program's NVTX range 'Loop' spans it: the anatomy says where.
    assert g["causes"]["no_activity"]["total_ns"] >= GAP and g["by_category"]["user_range"] >= GAP


def _drop(path: Path, *tables: str) -> None:
    con = sqlite_rw(path)
    with con:
        for table in tables:
            con.execute(f'DELETE FROM "{table}"')  # noqa: S608 - constant names
    con.close()


@pytest.mark.parametrize("sampled", ["sampled", "not-sampled", "sampled-nothing"])
def test_the_next_step_asks_only_for_capture_flags_the_export_did_not_use(tmp_path, sampled) -> None:
    """Issue #39 class 5: the export records its capture (its settings, and the CPU samples and OS runtime calls it
    holds); a flag already on is never the next step. The same host-bound export, with its CPU samples, names the
    sampled work and says to move it; without them and with sampling off in its settings (planted), it asks for
    --sample=cpu and only for that; without them but with sampling on in its settings (the capture sampled and
    recorded nothing there), it does not ask for it again."""
    src = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    if sampled != "sampled":
        _drop(src, "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS")
        open_gap(src, loop_gap(src), GAP)  # idle with nothing recorded: the host's work must be asked for
    if sampled == "not-sampled":
        con = sqlite_rw(src)
        with con:
            con.execute("UPDATE META_DATA_CAPTURE SET value = 'false' "
                        "WHERE name = 'LINUX_PERF_OPTIONS:COLLECT_IP_BACKTRACE_SAMPLES'")
        con.close()
    v = analyze([ingest_copy(src, tmp_path / "a.duckdb")]).to_json()["verdict"]
    said = v["text"] + " " + v["next_step"]
    assert v["kind"] == "host_bound", v
    assert "--trace=osrt" not in said  # the export traces OS runtime calls either way
    if sampled == "sampled":
        assert "--sample=cpu" not in said and "_Py_dg_dtoa" in v["next_step"], v
    elif sampled == "not-sampled":
        assert "--sample=cpu" in said and "sampled" not in v["text"], v
    else:
        assert "--sample=cpu" not in said and "NVTX" in said, v


def test_host_work_before_the_first_cuda_call_is_context_not_start_up(tmp_path) -> None:
    """Issue #39 classes 1 and 2: the same one-shot export (vecadd: pinned allocation before its GPU work), with 3 s
    more of host work planted before its first CUDA call (a 2.5 s read on the launching thread): the start-up
    verdict's cost is the same (it starts at the CUDA program's first call), and the sentence gives the host's
    stretch, with the read, as context. The calls it lists are taken on the start-up's own window, with the share
    of it their union covers."""
    def run(path: Path, out: Path) -> dict:
        return analyze([ingest_copy(path, out)]).to_json()["verdict"]

    base = run(copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "a.sqlite"), tmp_path / "a.duckdb")
    src = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "b.sqlite")
    con = sqlite_rw(src)
    (c0, tid) = con.execute("SELECT start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start LIMIT 1").fetchone()
    con.close()
    open_gap(src, c0, 3_000_000_000)
    con = sqlite_rw(src)
    rowid = con.execute("SELECT rowid FROM OSRT_API WHERE globalTid = ? LIMIT 1", [tid]).fetchone()[0]
    with con:
        clone_row(con, "OSRT_API", rowid, start=c0, end=c0 + 2_500_000_000, nameId=new_string(con, "read"))
    con.close()
    planted = run(src, tmp_path / "b.duckdb")
    assert base["kind"] == planted["kind"] == "startup"
    assert planted["impact_ns"] == base["impact_ns"] and 900_000_000 < base["impact_ns"] < 1_100_000_000
    assert "mostly cudaHostAlloc 815 ms" in planted["text"] and "together 85 % of it" in planted["text"]
    assert "3.50 s of host work before the first CUDA call (read 2.50 s" in planted["text"], planted["text"]
