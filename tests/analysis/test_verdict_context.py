"""Issue #39 classes 2, 5 and 8: what the verdict counts, and what it says as context instead.

Each test runs a real corpus export, or a variant of one planted at test time, and fails without the mechanism:

- start-up that feeds the GPU's data path (managed memory the host fills before the first kernel, whose pages then
  migrate in) is the one-shot program's own host work, counted with the window's; without that premise it is not;
- several kinds of host work in one host-bound window (CPU work and MPI) are one cost, named part by part;
- a capture that ended during start-up says so and how to capture the work;
- a one-shot program's only CUDA thread that sleeps is pausing: context, not host-bound;
- a run whose last CPU samples end in an uncaught exception or an abort failed: said, not tuned.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis import fmt
from analysis.api import analyze
from tests.analysis.planting import (
    clone_row,
    copy_export,
    ingest_copy,
    new_string,
    open_gap,
    point_tables,
    raw_gaps,
    sqlite_rw,
    time_tables,
)
from tests.conftest import NSYS_FILES, corpus_file

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


def cut_at(path: Path, at: int) -> None:
    """The capture stops at ``at``: every event from then on is gone, and so is every call or range still running
    then (nsys writes a call when it returns)."""
    con = sqlite_rw(path)
    with con:
        for table in time_tables(con):
            con.execute(f'DELETE FROM "{table}" WHERE start >= ? OR "end" > ?', [at, at])  # noqa: S608
        for table in point_tables(con):
            con.execute(f'DELETE FROM "{table}" WHERE start >= ?', [at])  # noqa: S608
    con.close()


@pytest.mark.parametrize(("at", "calls"), [(1_400_000_000, 3), (1_508_650_000, 15)],
                         ids=["after-host-allocation", "after-first-copy-calls"])
def test_a_capture_that_ended_during_start_up_says_so(tmp_path, at, calls) -> None:
    """Issue #39 class 5: vecadd cut at a time inside its set-up (after its pinned allocations; after its device
    allocations, streams and first two asynchronous copy calls, before the first launch). Cut there, the export has CUDA calls and no kernel: not "GPU tracing was
    off", not start-up to shorten, but a capture that ended before the work, with a capture that would hold it."""
    src = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "a.sqlite")
    whole = _run(src, tmp_path / "a.duckdb")["verdict"]
    assert "capture ended" not in whole["text"]
    cut_at(src, at)
    con = sqlite_rw(src)
    (c0,) = con.execute("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    (n_calls,) = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start > ?", [c0]).fetchone()
    (n_ops,) = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
    (n_kernels,) = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    (t1,) = con.execute("""SELECT MAX(e) FROM (SELECT MAX("end") e FROM CUPTI_ACTIVITY_KIND_RUNTIME
                           UNION ALL SELECT MAX("end") FROM OSRT_API)""").fetchone()
    con.close()
    assert t1 < at and (n_calls, n_ops, n_kernels) == (calls, 0, 0)
    v = _run(src, tmp_path / "b.duckdb")["verdict"]
    assert v["kind"] == "startup" and v["impact_ns"] is None, v
    assert v["text"].startswith("The capture ended during start-up") and "cudaHostAlloc" in v["text"], v["text"]
    assert "no GPU operation" in v["text"] and f"its {fmt.duration(t1 - c0)} from the first CUDA call" in v["text"]
    assert "--duration" in v["next_step"] and "--capture-range" in v["next_step"]
    assert "GPU activity tracing" not in v["text"]


def plant_quiet_call(path: Path, name: str, delta: int) -> int:
    """An OS call ``name`` on the launching thread over a gap opened where the GPU idles and no OS or CUDA call of
    that thread is in progress (so the planted call alone owns the opened idle)."""
    con = sqlite_rw(path)
    tid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                      "ON k.correlationId = r.correlationId LIMIT 1").fetchone()[0]
    busy = con.execute('SELECT start, "end" FROM OSRT_API WHERE globalTid = ? UNION ALL '
                       'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ?', [tid, tid]).fetchall()
    free = sorted(m for m in ((g[2] + g[3]) // 2 for g in raw_gaps(con) if g[3] - g[2] > 100_000)
                  if not any(s <= m <= e for s, e in busy))
    rowid = con.execute("SELECT rowid FROM OSRT_API WHERE globalTid = ? LIMIT 1", [tid]).fetchone()[0]
    con.close()
    at = free[len(free) // 2]
    open_gap(path, at, delta)
    con = sqlite_rw(path)
    with con:
        clone_row(con, "OSRT_API", rowid, start=at, end=at + delta, nameId=new_string(con, name))
    con.close()
    return delta


@pytest.mark.parametrize("call", ["nanosleep", "read"])
def test_a_one_shot_programs_only_thread_that_sleeps_is_pausing_not_host_bound(tmp_path, call) -> None:
    """Issue #39 class 8: stdpar (one-shot, one CUDA thread) with 2 s of ``call`` planted on that thread in a gap
    opened in its work. A sleep there is the program pausing on purpose (no other thread of its own to wait for):
    said as context, never the host-bound cause to move off the thread. A read of the same length is host work that
    leaves the GPU idle: HOST001 leads with it."""
    src = copy_export(corpus_file("stdpar-um-gpu.sqlite"), tmp_path / "a.sqlite")
    planted = plant_quiet_call(src, call, 2_000_000_000)
    result = _run(src, tmp_path / "a.duckdb")
    v = result["verdict"]
    (host001,) = [f for f in result["findings"] if f["rule_id"] == "HOST001"]
    assert host001["by_call"][call] >= planted  # HOST001 owns the planted call's idle either way
    if call == "read":
        assert v["rule_id"] == "HOST001" and v["impact_ns"] >= planted, v
        return
    assert v["rule_id"] != "HOST001" and "off the launching thread" not in v["next_step"], v
    assert v["impact_ns"] is None or v["impact_ns"] < planted, v
    assert f"only CUDA thread also sleeps {fmt.duration(host001['by_call'][call])} of the GPU's idle" in v["text"], v


def plant_frames(path: Path, frames: list[str], samples: int = 2) -> int:
    """The launching thread's last ``samples`` CPU samples get ``frames`` as their innermost frames (the rest of
    each call chain one level deeper), as a thread ending in them would show; returns the last sample's time."""
    con = sqlite_rw(path)
    tid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                      "ON k.correlationId = r.correlationId LIMIT 1").fetchone()[0]
    last = con.execute("SELECT id, start FROM COMPOSITE_EVENTS WHERE globalTid = ? ORDER BY start DESC LIMIT ?",
                       [tid, samples]).fetchall()
    with con:
        ids = [new_string(con, f) for f in frames]
        for sample, _ in last:
            (module,) = con.execute("SELECT module FROM SAMPLING_CALLCHAINS WHERE id = ? AND stackDepth = 0",
                                    [sample]).fetchone()
            con.execute("UPDATE SAMPLING_CALLCHAINS SET stackDepth = stackDepth + 10000 WHERE id = ?", [sample])
            con.execute("UPDATE SAMPLING_CALLCHAINS SET stackDepth = stackDepth - 10000 + ? WHERE id = ?",
                        [len(frames), sample])
            con.executemany("INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, stackDepth) VALUES (?, ?, ?, ?)",
                            [(sample, sid, module, depth) for depth, sid in enumerate(ids)])
    con.close()
    return int(last[0][1])


@pytest.mark.parametrize(("frames", "failed"), [
    (["raise", "abort", "__gnu_cxx::__verbose_terminate_handler()", "std::terminate()", "__cxa_throw"], True),
    (["_Unwind_RaiseException", "__cxa_throw"], False),
], ids=["uncaught", "thrown-and-caught"])
def test_a_run_that_failed_says_so_and_gives_no_tuning_advice(tmp_path, frames, failed) -> None:
    """Issue #39 class 5: saxpy whose launching thread's last CPU samples end in the C++ terminate handler and abort
    (an uncaught exception) failed: the verdict says so, with the frames, and asks to fix it, not to tune it. The
    same samples with only a throw (an exception caught, the run going on) leave the verdict as it was."""
    src = copy_export(corpus_file("saxpy-mpi-rank0-perlmutter.sqlite"), tmp_path / "a.sqlite")
    at = plant_frames(src, frames)
    result = _run(src, tmp_path / "a.duckdb")
    v = result["verdict"]
    if not failed:
        assert v["kind"] == "host_bound" and v["rule_id"] == "GPU001", v
        return
    assert v["kind"] == "failed_run" and v["impact_ns"] is None and v["rule_id"] is None, v
    assert v["text"].startswith("The run failed: an uncaught exception ends it (" + " < ".join(frames)), v["text"]
    assert "fix the failure" in v["next_step"] and "move" not in v["next_step"], v
    assert at > max(e for _, e in sqlite_rw(src).execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY'))


def _capture_used(short: str) -> dict[str, bool]:
    """The raw export's own word on its capture: its recorded settings (META_DATA_CAPTURE), else its rows."""
    import sqlite3

    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        settings = set(con.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name IN ('CAPTURE_EVENT_TYPE', "
                                   "'LINUX_PERF_OPTIONS:COLLECT_IP_BACKTRACE_SAMPLES')").fetchall()
                       ) if "META_DATA_CAPTURE" in tables else set()

        def rows(table: str) -> bool:
            return table in tables and con.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone() is not None  # noqa: S608

        return {"--sample=cpu": ("LINUX_PERF_OPTIONS:COLLECT_IP_BACKTRACE_SAMPLES", "true") in settings
                or rows("COMPOSITE_EVENTS"),
                "--trace=osrt": ("CAPTURE_EVENT_TYPE", "OSRuntime") in settings or rows("OSRT_API")}
    finally:
        con.close()


ASKS = {"--sample=cpu": r"--sample=cpu", "--trace=osrt": r"--trace=[\w,]*osrt|OS runtime trace \(--trace=osrt\)"}


@pytest.mark.parametrize("path", NSYS_FILES, ids=[p.name.split("__")[-1] for p in NSYS_FILES])
def test_no_sentence_asks_for_a_capture_flag_the_export_used(path) -> None:
    """Issue #39 class 5, everywhere a sentence asks for a flag: the verdict (text and next step) and every
    finding (title, message, advice) of every corpus export ask for --sample=cpu or --trace=osrt only when the
    export's capture settings and tables say it was off."""
    from tests.analysis.test_verdict_substance import _result

    short = path.name.split("__")[-1]
    used = _capture_used(short)
    result = _result(short)
    said = [("verdict", result["verdict"]["text"] + " " + (result["verdict"]["next_step"] or ""))]
    said += [(f["rule_id"], " ".join(str(f.get(k) or "") for k in ("title", "message", "advice")))
             for f in result["findings"]]
    wrong = [(who, flag) for who, text in said for flag, rx in ASKS.items() if used[flag] and re.search(rx, text)]
    assert not wrong, wrong


def plant_ptx_jit(path: Path) -> tuple[str, int, int, int]:
    """The CPU samples of the launching thread inside its first kernel launch get PTX-compiler frames as their
    innermost frames (the driver's JIT compiler called from the launch, as lazy loading of a PTX-only binary
    shows). Returns the launch's name, its duration and how many samples lie inside it, and the GPU's compute
    capability (``89`` for 8.9), all by SQL on the raw export."""
    con = sqlite_rw(path)
    tid, start, end, name = con.execute(
        'SELECT r.globalTid, r.start, r."end", s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN StringIds s ON s.id = r.nameId JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "ORDER BY r.start LIMIT 1").fetchone()
    inside = [r[0] for r in con.execute("SELECT id FROM COMPOSITE_EVENTS WHERE globalTid = ? AND start >= ? "
                                        'AND start < ?', [tid, start, end])]
    cc = "".join(str(v) for v in con.execute("SELECT computeMajor, computeMinor FROM TARGET_INFO_GPU").fetchone())
    frames = ["nvPTXCompilerCompile", "__cuda_ptx_jit_compile"]
    with con:
        ids = [new_string(con, f) for f in frames]
        jit = new_string(con, "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1")
        for sample in inside:
            con.execute("UPDATE SAMPLING_CALLCHAINS SET stackDepth = stackDepth + 10000 WHERE id = ?", [sample])
            con.execute("UPDATE SAMPLING_CALLCHAINS SET stackDepth = stackDepth - 10000 + ? WHERE id = ?",
                        [len(frames), sample])
            con.executemany("INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, stackDepth) VALUES (?, ?, ?, ?)",
                            [(sample, sid, jit, depth) for depth, sid in enumerate(ids)])
    con.close()
    return str(name).split("_v")[0], int(end - start), len(inside), cc


def test_a_first_launch_that_jit_compiles_ptx_asks_for_a_build_for_the_gpu(tmp_path) -> None:
    """Issue #39 class 5: vecadd's first cudaLaunchKernel runs 37 ms; planted: the CPU samples inside it are in the
    PTX JIT compiler (libnvidia-ptxjitcompiler / nvPTXCompiler frames). The start-up verdict names the JIT with its
    duration and samples (SQL on the raw export) and asks for a build for the GPU's architecture with the export's
    compute capability, not only for a warm-up; the export as recorded (the same samples in libcuda) does not."""
    short = "vecadd-2026.sqlite"
    plain = _run(copy_export(corpus_file(short), tmp_path / "p.sqlite"), tmp_path / "p.duckdb")["verdict"]
    src = copy_export(corpus_file(short), tmp_path / "a.sqlite")
    name, dur, n, cc = plant_ptx_jit(src)
    assert n >= 5 and dur > 10_000_000  # a long first launch, sampled inside
    v = _run(src, tmp_path / "a.duckdb")["verdict"]
    step = f"build for the GPU's architecture (-gencode arch=compute_{cc},code=sm_{cc})"
    assert step not in plain["next_step"] and "PTX" not in plain["text"], plain
    assert v["kind"] == plain["kind"] == "startup", v
    assert step in v["next_step"], v
    assert f"the first {name} JIT-compiles PTX: {fmt.duration(dur)} ({n} of its {n} CPU samples in the PTX " \
           "compiler)" in v["text"], v


def test_a_ptx_jit_that_is_most_of_the_cost_leads_the_next_step() -> None:
    """The PTX build leads when the JIT is at least half of the verdict's cost (the warm-up advice follows), comes
    right after the verdict's own fix when it is less, and a verdict that is not about set-up or compilation keeps
    its step."""
    from analysis.diagnosis.verdict import SETUP_NEXT, _with_ptx
    from analysis.results import Verdict

    jit = {"calls": [["cudaLaunchKernel", 0, 600, 9, 10]], "ns": 600, "archs": ["90"]}
    build = "build for the GPU's architecture (-gencode arch=compute_90,code=sm_90)"
    lead = _with_ptx(Verdict("startup", "Start-up dominates.", 1000, SETUP_NEXT, None), {"ptx_jit": jit})
    assert lead.next_step.startswith(build) and lead.next_step.endswith("; then " + SETUP_NEXT), lead
    assert lead.text == ("Start-up dominates; the first cudaLaunchKernel JIT-compiles PTX: 600 ns (9 of its 10 CPU "
                         "samples in the PTX compiler)."), lead
    after = _with_ptx(Verdict("jit", "x.", 5000, "compile once and cache; then profile", None), {"ptx_jit": jit})
    assert after.next_step.startswith("compile once and cache; then " + build) and after.next_step.endswith(
        "; then profile"), after
    other = Verdict("sync_bound", "x.", 1000, "remove the syncs", None)
    assert _with_ptx(other, {"ptx_jit": jit}) == other
