"""KRN004 (launch shapes that cannot fill the GPU) and KRN005 (one kernel dominates) on real exports and planted
variants; every expected number is computed here by SQL on the raw export, from the rules' published definitions."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

from analysis.api import analyze
from analysis.diagnosis.rules.nsys.shape import ncu_command
from tests.analysis.declared_cases import observe, rule_case
from tests.analysis.planting import copy_export, ingest_copy, ingested, sqlite_rw
from tests.conftest import corpus_file

# Compute kernels with their launch shape and their GPU's SM count, on the raw nsys tables.
RAW_SHAPES = """
SELECT k.deviceId, s.value, k."end" - k.start, k.gridX * k.gridY * k.gridZ, k.blockX * k.blockY * k.blockZ, g.smCount
FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
JOIN TARGET_INFO_GPU g ON g.cuDevice = k.deviceId
WHERE s.value NOT LIKE 'nccl%'
"""


def _run(path: Path, window: str = "all", **kw) -> dict:
    result = analyze([path], window=window, **kw).to_json()
    for rule in result["rules"]:
        if rule["id"] in ("KRN004", "KRN005"):
            observe(rule["id"], rule["status"], rule["findings"])
    return result


def _one(result: dict, rule_id: str) -> dict | None:
    found = [f for f in result["findings"] if f["rule_id"] == rule_id]
    assert len(found) <= 1, found
    return found[0] if found else None


def _raw(src: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _expected_shape_cost(src: Path) -> tuple[int, int]:
    """(KRN004's cost, the time of the small launches): per shape, its time x (1 - min(B, SMs)/SMs x min(T, 32)/32)."""
    groups: dict[tuple, int] = defaultdict(int)
    for dev, name, ns, blocks, threads, sm in _raw(src, RAW_SHAPES):
        if blocks < sm or threads < 32:
            groups[(dev, name, blocks, threads, sm)] += ns
    cost = sum(round(ns * (1 - min(b, sm) / sm * min(t, 32) / 32)) for (_, _, b, t, sm), ns in groups.items())
    return cost, sum(groups.values())


@rule_case("KRN004", "fires")
def test_krn004_single_block_kernel_on_a_mig_slice() -> None:
    """nussinov_gpu: 1 block of 512 threads on a 28-SM slice; the GPU looks 99% busy."""
    src = corpus_file("a30-mig.sqlite")
    cost, small = _expected_shape_cost(src)
    f = _one(_run(ingested(src)), "KRN004")
    assert f is not None and f["impact_ns"] == cost and f["small_kernel_ns"] == small
    assert cost == round(446_037_161 * 27 / 28)  # the label's 446.0 ms kernel, 27 of 28 SMs unused
    ev = f["evidence"][0]
    assert (ev["name"], ev["detail"]["blocks"], ev["detail"]["threads_per_block"], ev["detail"]["sm_count"]) == \
        ("nussinov_gpu", 1, 512, 28)


@rule_case("KRN004", "fires")
def test_krn004_one_thread_kernels_cost_almost_all_their_time() -> None:
    src = corpus_file("openacc-v100.sqlite")
    cost, small = _expected_shape_cost(src)
    f = _one(_run(ingested(src)), "KRN004")
    assert f is not None and f["impact_ns"] == cost
    assert f["evidence"][0]["detail"]["threads_per_block"] == 1 and cost > 0.99 * small


@rule_case("KRN004", "silent")
def test_krn004_silent_once_the_grid_covers_every_sm(tmp_path) -> None:
    src = copy_export(corpus_file("a30-mig.sqlite"), tmp_path / "wide.sqlite")
    con = sqlite_rw(src)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = (SELECT smCount FROM TARGET_INFO_GPU LIMIT 1)")
    con.commit()
    con.close()
    result = _run(ingest_copy(src, tmp_path / "wide.duckdb"))
    assert _one(result, "KRN004") is None
    assert {r["id"]: r["status"] for r in result["rules"]}["KRN004"] == "ok"


@rule_case("KRN004", "silent")
def test_krn004_ignores_nccl_kernels_few_blocks_by_design() -> None:
    """The ring AllReduce runs 2 blocks on an 82-SM GPU: NCCL's channels, not a launch mistake."""
    src = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    assert _raw(src, "SELECT gridX * gridY * gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL") == [(2,)]
    result = _run(ingested(src))
    assert _one(result, "KRN004") is None and _one(result, "KRN005") is None


def test_krn004_skips_without_sm_count(tmp_path) -> None:
    src = copy_export(corpus_file("a30-mig.sqlite"), tmp_path / "nosm.sqlite")
    con = sqlite_rw(src)
    con.execute("UPDATE TARGET_INFO_GPU SET smCount = NULL")
    con.commit()
    con.close()
    status = {r["id"]: r for r in _run(ingest_copy(src, tmp_path / "nosm.duckdb"))["rules"]}["KRN004"]
    assert status["status"] == "skipped" and "SM count" in status["reason"]


@rule_case("KRN005", "fires")
def test_krn005_names_the_kernel_and_skips_the_warm_up_launches() -> None:
    """Fan2 is ~98% of the GPU time of the steady loop; the ncu command skips its launches before that window, or
    the first (cold) launch when none is before it: gaussian's loop has no warm-up (its work shrinks step by step, a
    trend: test_trend), so the window starts at the first step."""
    src = corpus_file("gaussian-threadsync.sqlite")
    result = _run(ingested(src), window="steady")
    f = _one(result, "KRN005")
    assert f is not None
    lo, hi = result["reports"][0]["window"]["start_ns"], result["reports"][0]["window"]["end_ns"]
    # The ingest keeps raw times here (nanoseconds from the session start), so the window compares directly.
    rows = _raw(src, """SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                        WHERE s.value = 'Fan2'""")
    inside = sum(min(e, hi) - max(s, lo) for s, e in rows if s < hi and e > lo)
    before = sum(1 for s, _ in rows if s < lo)
    total = sum(min(e, hi) - max(s, lo) for s, e in _raw(
        src, 'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL') if s < hi and e > lo)
    assert f["impact_ns"] == inside and f["kernel"] == "Fan2"
    assert abs(f["share_pct"] - 100 * inside / total) < 1e-3
    skip = before or 1
    assert f["launch_skip"] == skip
    assert f["ncu_command"] == ncu_command("Fan2", skip, "./gaussian")
    assert f"--launch-skip {skip} --launch-count 1 --set full" in f["ncu_command"]


@rule_case("KRN005", "silent")
def test_krn005_silent_when_no_kernel_has_half_the_time() -> None:
    src = corpus_file("tensorrt-3090.sqlite")
    rows = _raw(src, """SELECT s.value, SUM(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                        JOIN StringIds s ON s.id = k.shortName GROUP BY 1""")
    assert max(ns for _, ns in rows) < 0.5 * sum(ns for _, ns in rows)
    assert _one(_run(ingested(src)), "KRN005") is None


def test_ncu_command_escapes_names_that_are_not_identifiers() -> None:
    cmd = ncu_command("void at::native::<lambda>(int)", 3, None)
    assert "--kernel-name 'regex:^void\\ at::native::<lambda>\\(int\\)$'" in cmd
    assert cmd.endswith("<app> [args]") and "--launch-skip 3" in cmd
    assert ncu_command("Fan2", 0, "my app; rm -rf /").endswith("'my app; rm -rf /' [args]")


def test_krn004_skips_an_older_export_without_launch_shapes(tmp_path) -> None:
    """Exports from before the kernel table carried grid and block sizes ingest with those columns NULL."""
    src = copy_export(corpus_file("a30-mig.sqlite"), tmp_path / "old.sqlite")
    con = sqlite_rw(src)
    for col in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"):
        con.execute(f"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN {col}")
    con.commit()
    con.close()
    result = _run(ingest_copy(src, tmp_path / "old.duckdb"))
    status = {r["id"]: r for r in result["rules"]}
    assert status["KRN004"]["status"] == "skipped" and "grid or block sizes" in status["KRN004"]["reason"]
    assert status["KRN005"]["status"] == "ok" and _one(result, "KRN005") is not None  # needs no shapes
