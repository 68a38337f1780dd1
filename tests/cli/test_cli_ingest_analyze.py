"""`goodput ingest` and `goodput analyze` as a user runs them: exit codes, stdout contract, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from analysis import fmt
from tests.conftest import ROOT, corpus_file


def goodput(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodput_cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd or ROOT)


def _direct(src: Path, sql: str):
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def test_ingest_writes_the_normalized_file(tmp_path):
    src = corpus_file("cloverleaf-devsync.sqlite")
    out = tmp_path / "r.duckdb"
    proc = goodput("ingest", str(src), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # --quiet: no progress lines either
    assert "kernels 1,312" in proc.stdout
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1312
    con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.duckdb"]


def test_analyze_json_contract_on_two_ranks():
    r0, r1 = corpus_file("nccl-ring-2node-r0-ault43.sqlite"), corpus_file("nccl-ring-2node-r1-ault44.sqlite")
    proc = goodput("analyze", str(r0), str(r1), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) >= {"reports", "findings"}
    reports = result["reports"]
    assert [r["file"] for r in reports] == [str(r0), str(r1)]
    for rep, src in zip(reports, (r0, r1), strict=True):
        assert rep["tool"] == "nsys" and rep["tool_version"] == "2024.5.1.113"
        assert rep["world_size"] == 2
        assert rep["counts"]["kernels"] == _direct(src, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        assert rep["counts"]["memcpy"] == _direct(src, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        assert rep["counts"]["memset"] == _direct(src, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")
        assert rep["gpu_time_ns"] == _direct(src, 'SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
        assert rep["memcpy_bytes"] == _direct(src, "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        assert rep["devices"] == [{"id": 0, "name": "NVIDIA GeForce RTX 3090"}]
        assert isinstance(rep["pids"], list) and rep["pids"]
        assert rep["span_ns"] > 0
    assert [r["rank"] for r in reports] == [0, 1]


def test_analyze_json_nulls_when_the_export_does_not_say():
    proc = goodput("analyze", str(corpus_file("cudf-groupby-2020.sqlite")), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)["reports"][0]
    assert rep["tool_version"] is None and rep["rank"] is None and rep["world_size"] is None
    assert rep["devices"] == [{"id": 0, "name": "Quadro RTX 8000"}]


def test_analyze_text_summary():
    proc = goodput("analyze", str(corpus_file("gaussian-threadsync.sqlite")))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "nsys 2022.4.2.1" in out and "NVIDIA GeForce RTX 3090" in out
    assert "top kernels by total time" in out and "Fan2" in out and "x4,095" in out
    assert "memcpy by kind" in out and "HtoD" in out and "DtoH" in out


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    files = {}
    files["empty_file"] = tmp_path / "empty.sqlite"
    files["empty_file"].write_bytes(b"")
    files["not_sqlite"] = tmp_path / "photo.sqlite"
    files["not_sqlite"].write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    data = corpus_file("vecadd-2026.sqlite").read_bytes()
    files["corrupt"] = tmp_path / "half.sqlite"
    files["corrupt"].write_bytes(data[: len(data) // 2])
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    files["not_nsys_export"] = other
    view = tmp_path / "view.sqlite"
    shutil.copyfile(corpus_file("vecadd-2026.sqlite"), view)
    os.chmod(view, 0o644)
    con = sqlite3.connect(view)
    con.execute("ALTER TABLE StringIds RENAME TO s")
    con.execute("CREATE VIEW StringIds AS SELECT * FROM s")
    con.commit()
    con.close()
    files["unsafe_schema"] = view
    return files


@pytest.mark.parametrize("command", ["ingest", "analyze"])
def test_bad_input_exits_2_with_one_line_and_no_output(tmp_path, command):
    for code, src in _bad_files(tmp_path).items():
        out = tmp_path / "out" / f"{code}.duckdb"
        args = ("ingest", str(src), "--out", str(out)) if command == "ingest" else ("analyze", str(src))
        # Plain progress lines start once work has lasted 2 s; on a loaded machine a bad file's checks can take
        # that long, and a progress line before the error is right then. This test is about the error's shape.
        proc = goodput(*args, "--progress-after", "600")
        assert proc.returncode == 2, (code, proc.stderr)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and proc.stderr.endswith("\n"), proc.stderr
        assert lines[0].startswith(f"goodput: {src}: {code}: "), lines[0]
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert not out.exists()
        if out.parent.exists():
            assert list(out.parent.iterdir()) == []


def test_missing_file_and_existing_output(tmp_path):
    proc = goodput("analyze", str(tmp_path / "nope.sqlite"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and ": not_found: " in proc.stderr
    out = tmp_path / "taken.duckdb"
    out.write_bytes(b"keep me")
    proc = goodput("ingest", str(corpus_file("a30-mig.sqlite")), "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert out.read_bytes() == b"keep me"


def test_analyze_window_option():
    vecadd = corpus_file("vecadd-2026.sqlite")
    out = goodput("analyze", "--window", "startup", "--format", "json", "--quiet", str(vecadd))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["window"] == "startup" and result["reports"][0]["window"]["phase"] == "startup"
    # The start-up is judged as such (PHASE001 first), and the rules judge the start-up window itself
    # (vecadd's start-up is its copies: MEM005 may say so).
    ids = [f["rule_id"] for f in result["findings"]]
    assert ids[0] == "PHASE001" and "GPU001" not in ids
    text = goodput("analyze", "--quiet", str(vecadd))
    # vecadd is one-shot (four chunks on four streams, no loop): start-up, work (the default window), teardown.
    assert "phases: startup" in text.stdout and ", work " in text.stdout and "window steady: work" in text.stdout
    for bad, why in (("sometimes", "is not one of"), ("nvtx:missing", "no NVTX range named"),
                     ("iterations:0-3", "(0 found; it has no loop)"), ("time:3600s-7200s", "holds none of the report")):
        res = goodput("analyze", "--window", bad, "--quiet", str(vecadd))
        assert res.returncode == 2 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
        assert "bad_window" in res.stderr and why in res.stderr


def test_analyze_text_on_steps_without_gpu_time():
    # NVTX steps in a host-only report: no GPU spread to print (this crashed the text renderer).
    proc = goodput("analyze", str(corpus_file("poolformer-nvtx-only.sqlite")), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "iterations: 188 x NVTX '3D_backbone'" in proc.stdout and "no GPU time" in proc.stdout
    assert "wall median 16.0 ms" in proc.stdout


def test_analyze_text_says_per_step_on_a_loop_window():
    """On the steady window of a loop, a finding's impact reads per step (its total over the window's
    steps beside it), the step-time distribution is shown and the slowest steps name their cause."""
    src = corpus_file("cupy-power-iteration.sqlite")
    result = json.loads(goodput("analyze", "--format", "json", "--quiet", str(src)).stdout)
    text = goodput("analyze", "--quiet", str(src)).stdout
    gpu = next(f for f in result["findings"] if f["rule_id"] == "GPU001")
    n = gpu["steps_in_window"]
    assert n == result["reports"][0]["iterations"]["anatomy"]["steady_count"] > 1
    assert gpu["impact_per_step_ns"] == round(gpu["impact_ns"] / n)
    per_step = f"{fmt.duration(gpu['impact_per_step_ns'])} per step ({fmt.pct(gpu['impact_pct'])})"
    assert f"GPU001 {per_step} [steady, {n} steps: {fmt.duration(gpu['impact_ns'])}]" in text
    dist = result["reports"][0]["iterations"]["iteration_time"]
    assert f"step time: p10 {fmt.duration(dist['p10_ns'])}, median {fmt.duration(dist['median_ns'])}" in text
    slow = result["reports"][0]["iterations"]["anatomy"]["slowest_steps"][0]
    assert f"slow step {slow['index']}: " in text and slow["cause"] in text
    # The whole report is no loop stretch: totals, no "per step" on the findings.
    whole = goodput("analyze", "--window", "all", "--quiet", str(src)).stdout
    assert "ms per step (" not in whole and "GPU001 " in whole
