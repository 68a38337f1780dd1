"""Comparisons judge kernels per step as well as per launch, match findings like with like, and take per-step
numbers from inside the steps. The head is a planted variant of the corpus torchrun pair (two ranks in one
export): every ``ncclDevKernel_SendRecv`` launch doubled on another stream, so its launches are the same and
its time per step doubles. Expected numbers from the exports' kernel rows, read with SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis.model.trace import Trace
from analysis.views.compare import kpis
from analysis.views.compare_findings import match_findings
from tests.analysis.planting import clone_row, copy_export, ingest_copy, ingested, sqlite_rw
from tests.cli.variants import goodput
from tests.conftest import corpus_file

BASE = corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite")
NAME = "ncclDevKernel_SendRecv"


def _double_sendrecv(dst: Path) -> Path:
    copy_export(BASE, dst)
    con = sqlite_rw(dst)
    with con:
        rows = con.execute("""SELECT k.rowid, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                              ON s.id = k.shortName WHERE s.value = ?""", [NAME]).fetchall()
        for rowid, stream in rows:
            clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid, streamId=stream + 1000, correlationId=None)
    con.close()
    return dst


@pytest.fixture(scope="module")
def doubled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _double_sendrecv(tmp_path_factory.mktemp("perstep") / "doubled.sqlite")


def _per_step_raw(export: Path, normalized: Path) -> np.ndarray:
    """The kernel's time in each step: the step bounds the analysis found (its iterations table), the launches
    from the export (this export's times are the normalized ones)."""
    t = Trace(normalized, "x")
    try:
        bounds = t.sql("SELECT start_ns, end_ns FROM iterations ORDER BY idx")
    finally:
        t.close()
    con = sqlite3.connect(export)
    out = [con.execute("""SELECT COALESCE(SUM(k."end" - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                          ON s.id = k.shortName WHERE s.value = ? AND k.start >= ? AND k.start < ?""",
                       [NAME, lo, hi]).fetchone()[0] for lo, hi in bounds]
    con.close()
    return np.asarray(out, dtype=np.int64)


def test_a_per_step_regression_is_caught_when_launches_look_the_same(doubled: Path, tmp_path: Path) -> None:
    proc = goodput("diff", str(BASE), str(doubled), "--fail-on", f"kernel:{NAME}:+10%", "--format", "json", "--quiet")
    assert proc.returncode == 1, proc.stderr  # the gate fails
    diff = json.loads(proc.stdout)
    (row,) = [r for r in diff["kernel_table"] if r["name"].startswith(NAME)]
    assert row["per_launch_ns"]["changed"] is False and row["per_launch_ns"]["delta_pct"] == 0.0
    ps = row["per_step_ns"]
    assert ps["changed"] is True and row["status"] == "changed" and row["changed_by"] == ["per_step"]
    base = _per_step_raw(BASE, ingested(BASE))
    head = _per_step_raw(doubled, ingest_copy(doubled, tmp_path / "head.duckdb"))
    assert ps["base"]["n"] == len(base) == 16 and ps["head"]["n"] == len(head)
    assert ps["base"]["median"] == pytest.approx(float(np.median(base))) and ps["head"]["median"] == pytest.approx(
        float(np.median(head)))
    assert ps["delta_pct"] == pytest.approx(100.0, abs=0.01)  # every step's time doubled
    # launches per step counted inside the steps
    con = sqlite3.connect(BASE)
    assert row["launches_per_step"]["base"] == pytest.approx(_launches_inside(con, ingested(BASE)) / 16, abs=1e-3)
    con.close()
    (gate,) = diff["gate"]
    assert gate["status"] == "failed" and gate["observed"] == pytest.approx(100.0, abs=0.01)
    # kernel time per step: what lies inside the steps, from the same SQL
    kt = diff["kpis"]["kernel_time_per_step_ns"]
    assert kt["source"] == "inside_steps"
    assert kt["head"] - kt["base"] == pytest.approx(float(np.mean(head) - np.mean(base)), abs=0.2)
    # one change per step-time row: the tested estimate, the medians' ratio kept apart
    st = diff["kpis"]["step_time_median_ns"]
    assert st["estimator"] == "hodges_lehmann_ratio" and st["delta_pct"] == diff["steps"]["step_time_ns"]["delta_pct"]
    text = goodput("diff", str(BASE), str(doubled), "--quiet").stdout
    assert "+100.0 % per step" in text and "[changed per step]" in text


def _launches_inside(con: sqlite3.Connection, normalized: Path) -> int:
    t = Trace(normalized, "x")
    try:
        bounds = t.sql("SELECT start_ns, end_ns FROM iterations ORDER BY idx")
    finally:
        t.close()
    return sum(con.execute("""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                              WHERE s.value = ? AND k.start >= ? AND k.start < ?""", [NAME, lo, hi]).fetchone()[0]
               for lo, hi in bounds)


def _krn005(devices: list[tuple[int, int]], ns: int) -> dict:
    ev = [{"pid": p, "device": d, "name": "flash_fwd_kernel", "value_ns": ns // len(devices)} for p, d in devices]
    return {"rule_id": "KRN005", "rank": None, "phase": "steady", "kernel": "flash_fwd_kernel", "impact_ns": ns,
            "evidence": ev, "evidence_total": len(ev), "severity": "critical", "title": "One kernel"}


def test_findings_match_only_on_the_same_kernel_and_devices() -> None:
    both, one = _krn005([(144, 0), (145, 1)], 272_000_000), _krn005([(145, 1)], 120_000_000)
    out = match_findings([both], [one])
    assert out["matched"] == []  # two GPUs before, one after: not the same quantity
    (new,) = out["new"]
    assert new["other_scope"]["devices"] == [[144, 0], [145, 1]]
    same = match_findings([both], [_krn005([(144, 0), (145, 1)], 250_000_000)])
    assert len(same["matched"]) == 1 and same["matched"][0]["impact_ns"]["delta"] == -22_000_000
    other_kernel = {**both, "kernel": "gemm"}
    assert match_findings([both], [other_kernel])["matched"] == []


def test_two_ncu_reports_compare_no_kernel_time() -> None:
    out = kpis({}, {}, None, ({}, {}))
    assert out["kernel_time_ns"] == {"base": None, "head": None, "delta": None, "delta_pct": None}


LATER = 500_000  # ns: in the planted head, each SendRecv instance's last rank arrives this much later (start
# and end), and the other rank's kernel ends as much later: it waits LATER longer, every transfer is the same


def _later(dst: Path) -> Path:
    copy_export(BASE, dst)
    con = sqlite_rw(dst)
    with con:
        rows = con.execute("""SELECT k.rowid, k.globalPid, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                              ON s.id = k.shortName WHERE s.value = ? ORDER BY k.start""", [NAME]).fetchall()
        by: dict[int, list[tuple[int, int]]] = {}
        for rowid, pid, start in rows:
            by.setdefault(pid, []).append((rowid, start))
        assert len(by) == 2 and len({len(v) for v in by.values()}) == 1
        for pair in zip(*by.values(), strict=True):
            (late, _), (early, _) = sorted(pair, key=lambda r: -r[1])
            con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?, "end" = "end" + ? WHERE rowid = ?',
                        [LATER, LATER, late])
            con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + ? WHERE rowid = ?', [LATER, early])
    con.close()
    return dst


def _split_raw(export: Path) -> tuple[float, float, int]:
    """(mean wait, mean transfer, instances) per instance and rank of the export's SendRecv kernels: the k-th
    launch of each process is one instance; wait = last arrival - own, transfer = own end - last arrival."""
    con = sqlite3.connect(export)
    rows = con.execute("""SELECT p.pid, k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                          ON s.id = k.shortName JOIN (SELECT DISTINCT globalPid / 16777216 % 16777216 AS pid, globalPid
                          FROM CUPTI_ACTIVITY_KIND_KERNEL) p ON p.globalPid = k.globalPid
                          WHERE s.value = ? ORDER BY k.start""", [NAME]).fetchall()
    con.close()
    by: dict[int, list[tuple[int, int]]] = {}
    for pid, a, b in rows:
        by.setdefault(pid, []).append((a, b))
    n = min(len(v) for v in by.values())
    wait = transfer = 0
    for i in range(n):
        last = max(v[i][0] for v in by.values())
        wait += sum(last - v[i][0] for v in by.values())
        transfer += sum(max(v[i][1] - last, 0) for v in by.values())
    return wait / (n * len(by)), transfer / (n * len(by)), n


def test_communication_kernels_say_whether_waiting_or_transfer_changed(tmp_path: Path) -> None:
    head = _later(tmp_path / "later.sqlite")
    proc = goodput("diff", str(BASE), str(head), "--window", "all", "--format", "json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    c = json.loads(proc.stdout)["collectives"]
    (wb, xb, nb), (wh, xh, nh) = _split_raw(BASE), _split_raw(head)
    assert c["instances"]["base"] == nb and c["instances"]["head"] == nh
    assert c["wait_per_instance_ns"]["base"] == pytest.approx(wb, abs=0.1)
    assert c["wait_per_instance_ns"]["head"] == pytest.approx(wh, abs=0.1)
    assert c["transfer_per_instance_ns"]["base"] == pytest.approx(xb, abs=0.1)
    assert c["transfer_per_instance_ns"]["head"] == pytest.approx(xh, abs=0.1)
    assert c["wait_per_instance_ns"]["changed"] is True and c["said"].startswith("waiting grew")
    # Tested as the compute kernels are, per step (Mann-Whitney over the steps): the samples are each step's
    # waiting and transfer summed over its instances and ranks, from the raw rows and the steps found
    assert c["tested"] is True and c["basis"].startswith("per step")
    for side, export in (("base", BASE), ("head", head)):
        raw_w, raw_x = _split_per_step_raw(export, ingested(export))
        assert c["wait_per_step_ns"][side]["median"] == pytest.approx(float(np.median(raw_w)))
        assert c["transfer_per_step_ns"][side]["median"] == pytest.approx(float(np.median(raw_x)))
        assert c["wait_per_step_ns"][side]["n"] == len(raw_w)
    w = c["wait_per_step_ns"]
    assert w["test"] == "mann_whitney" and w["p_value"] < 0.01 and w["changed"] is True and w["delta_pct"] > 0
    x = c["transfer_per_step_ns"]  # the same transfers: not changed, whatever the means do
    assert x["changed"] is False and c["said"] == "waiting grew, transfer unchanged"
    text = goodput("diff", str(BASE), str(head), "--window", "all", "--quiet")
    assert "waiting per step: median " in text.stdout and "p < 0.001; changed)" in text.stdout and w["p_value"] < 0.001


def _split_per_step_raw(export: Path, normalized: Path) -> tuple[np.ndarray, np.ndarray]:
    """Per step (the analysis' iterations), the waiting and transfer summed over the SendRecv instances that the
    first rank to arrive starts inside it, and over both ranks; from the export's kernel rows."""
    t = Trace(normalized, "x")
    try:
        bounds = t.sql("SELECT start_ns, end_ns FROM iterations ORDER BY idx")
    finally:
        t.close()
    con = sqlite3.connect(export)
    rows = con.execute("""SELECT k.globalPid, k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                          ON s.id = k.shortName WHERE s.value = ? ORDER BY k.start""", [NAME]).fetchall()
    con.close()
    by: dict[int, list[tuple[int, int]]] = {}
    for pid, a, b in rows:
        by.setdefault(pid, []).append((a, b))
    w, x = np.zeros(len(bounds), dtype=np.int64), np.zeros(len(bounds), dtype=np.int64)
    for i in range(min(len(v) for v in by.values())):
        first, last = min(v[i][0] for v in by.values()), max(v[i][0] for v in by.values())
        for j, (lo, hi) in enumerate(bounds):
            if lo <= first < hi:
                w[j] += sum(last - v[i][0] for v in by.values())
                x[j] += sum(max(v[i][1] - last, 0) for v in by.values())
    return w, x


def test_communication_kernels_fall_back_to_instances_then_to_means() -> None:
    """Without steps on one side the per-instance sums are tested (Mann-Whitney over instances); a split stored
    before the samples were kept is compared by its means against the floor, and says it was not tested."""
    from analysis.views.compare import diff_collectives

    def split(waits: list[int], transfers: list[int], steps: list[int] | None) -> dict:
        n = len(waits)
        return {"instances": n, "per_rank": [{}, {}], "wait_ns": sum(waits), "transfer_ns": sum(transfers),
                "samples": {"per_instance": {"wait_ns": waits, "transfer_ns": transfers},
                            "per_step": None if steps is None else {"wait_ns": steps, "transfer_ns": steps}}}

    base = split([100 + i for i in range(20)], [500] * 20, [1, 2, 3])
    head = split([300 + i for i in range(20)], [500] * 20, None)
    c = diff_collectives(base, head, 5.0)
    assert c is not None and c["tested"] is True and c["basis"].startswith("per collective instance")
    w, x = c["wait_per_instance_sample_ns"], c["transfer_per_instance_sample_ns"]
    assert w["base"]["median"] == pytest.approx(float(np.median(base["samples"]["per_instance"]["wait_ns"])))
    assert w["test"] == "mann_whitney" and w["changed"] is True and x["changed"] is False
    assert c["said"] == "waiting grew, transfer unchanged" and "wait_per_step_ns" not in c
    old = {k: v for k, v in base.items() if k != "samples"}
    c = diff_collectives(old, head, 5.0)
    assert c is not None and c["tested"] is False and c["basis"].startswith("mean per instance and rank")
    assert c["wait_per_instance_ns"]["base"] == pytest.approx(sum(base["samples"]["per_instance"]["wait_ns"]) / 40, abs=0.1)
