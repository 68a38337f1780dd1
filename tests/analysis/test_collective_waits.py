"""Waiting apart from transfer, per collective instance and rank, on a planted late node: rank 1 of the
corpus' 2-node pair arrives later at its AllReduce (everything from its kernel on moves later) and rank 0's
AllReduce, which cannot finish without it, ends as much later. Expected numbers from the planted exports'
kernel rows, read with SQLite (this pair's exports carry absolute UTC times)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from analysis.results import Verdict
from analysis.run.runner import analyze_run
from analysis.run.waiting import critical_verdict
from tests.analysis.planting import copy_export, ingest_copy, open_gap, sqlite_rw
from tests.conftest import corpus_file

R0 = "nccl-ring-2node-r0-ault43.sqlite"
R1 = "nccl-ring-2node-r1-ault44.sqlite"
LATE = 5_000_000  # ns rank 1 arrives later in the planted variant


def _nccl(path: Path) -> tuple[int, int]:
    con = sqlite3.connect(path)
    (row,) = con.execute("""SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                            ON s.id = k.shortName WHERE s.value LIKE 'ncclKernel%'""").fetchall()
    con.close()
    return int(row[0]), int(row[1])


@pytest.fixture(scope="module")
def late(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = copy_export(corpus_file(R1), tmp_path_factory.mktemp("late") / "r1-late.sqlite")
    open_gap(dst, _nccl(dst)[0], LATE)
    return dst


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = copy_export(corpus_file(R0), tmp_path_factory.mktemp("late") / "r0-waits.sqlite")
    _, end = _nccl(dst)
    open_gap(dst, end, LATE)  # its kernel spans ``end``: it lasts LATE longer, the rest moves later
    return dst


def test_each_rank_waits_for_the_last_arrival_and_names_it(late: Path, waiting: Path, tmp_path: Path) -> None:
    out = analyze_run([ingest_copy(waiting, tmp_path / "r0.duckdb"), ingest_copy(late, tmp_path / "r1.duckdb")],
                      labels=[R0, R1]).to_json()
    (s0, e0), (s1, e1) = _nccl(waiting), _nccl(late)
    assert e0 > s1  # rank 0 ends after the last arrival
    assert s1 - s0 > LATE  # rank 1 is the last to arrive
    c = out["collectives"]
    (item,) = c["items"]
    by = {r["rank"]: r for r in item["ranks"]}
    assert item["last"] == "rank 1"
    assert by["rank 0"]["wait_ns"] == s1 - s0 and by["rank 0"]["waited_for"] == "rank 1"
    assert by["rank 0"]["transfer_ns"] == e0 - s1 and by["rank 1"]["transfer_ns"] == e1 - s1
    assert by["rank 1"]["wait_ns"] == 0 and by["rank 1"]["waited_for"] is None
    p0 = next(p for p in c["participants"] if p["rank"] == "rank 0")
    assert p0["waited_for"] == {"rank 1": s1 - s0}
    crit = c["critical"]
    assert crit["rank"] == "rank 1" and crit["others_wait_ns"] == s1 - s0 and crit["instances_last"] == 1
    total = (s1 - s0) + (e0 - s1) + (e1 - s1)
    assert crit["share_of_collective_time_pct"] == pytest.approx(100 * (s1 - s0) / total, abs=1e-3)
    assert crit["leads_verdict"] is True and "clocks agree" in c["clock"]
    # COMM001 on rank 0 (no compute: its whole NCCL kernel is exposed) no longer counts the waiting: its cost is
    # the transfer; the wait is the late rank's (COMM002)
    rep0 = next(r for r in out["reports"] if r["rank"] == 0)
    (c1,) = [f for f in rep0["findings"] if f["rule_id"] == "COMM001"]
    assert c1["exposed_with_waiting_ns"] == e0 - s0 and c1["waiting_ns"] == s1 - s0 and c1["impact_ns"] == e0 - s1
    assert "was waiting for rank 1 to arrive" in c1["message"]
    from goodput_cli.render import text

    report = text(out)
    assert "rank 0 (ault43.cscs.ch): waiting" in report and "(for rank 1 " in report
    assert "critical path: rank 1 (ault44.cscs.ch) arrives last at 1 of 1 collective(s)" in report


def test_the_run_verdict_follows_the_critical_path() -> None:
    comm = Verdict("communication", "Exposed communication 12 ms.", 12, "overlap it", "COMM001")
    host = Verdict("host_bound", "The host is busy in Python 30 ms.", 30, "profile the host", "HOST001")
    waits = {"critical": {"rank": "rank 1", "host": "b", "others_wait_ns": 25_000_000, "instances_last": 4,
                          "instances": 5, "share_of_collective_time_pct": 60.0, "leads_verdict": True}}
    v = critical_verdict(comm, [comm, host], ["rank 0", "rank 1"], waits)
    assert v is not None and v.kind == "host_bound" and v.rule_id == "HOST001"
    assert v.text.startswith("Critical path: rank 1 on b arrives last at 4 of 5 collective(s)")
    assert v.text.endswith("Its own bound: The host is busy in Python 30 ms.")
    # ranks that arrive together, or a run bound by its start-up: the verdict stays
    quiet = {"critical": {**waits["critical"], "leads_verdict": False}}
    assert critical_verdict(comm, [comm, host], ["rank 0", "rank 1"], quiet) is comm
    start = Verdict("startup", "Start-up dominates.", 9, "warm up", "PHASE001")
    assert critical_verdict(start, [start, host], ["rank 0", "rank 1"], waits) is start


def test_comm001_does_not_advise_overlap_without_compute(tmp_path: Path) -> None:
    import sqlite3 as sq

    from analysis.api import analyze
    from analysis.diagnosis.rules.nsys.comm import NO_COMPUTE_ADVICE, ExposedCommunication
    from tests.analysis.planting import ingested

    con = sq.connect(corpus_file(R0))
    names = {n for (n,) in con.execute("""SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                                          ON s.id = k.shortName""")}
    con.close()
    assert all(n.startswith("nccl") for n in names)  # the export runs no compute kernel
    (f,) = analyze([ingested(corpus_file(R0))], labels=[R0], rules=["COMM001"], window="all").to_json()["findings"]
    assert f["advice"] == NO_COMPUTE_ADVICE and f["has_compute"] is False and "nothing to overlap" in f["message"]
    # with compute beside it (vecadd's kernels, an NCCL kernel planted in an idle gap): the overlap advice stays
    from tests.analysis.rule_cases import comm001_fires

    path = copy_export(corpus_file("vecadd-2026.sqlite"), tmp_path / "vecadd-nccl.sqlite")
    comm001_fires(path, None)
    (g,) = analyze([ingest_copy(path, tmp_path / "vecadd-nccl.duckdb")], rules=["COMM001"], thresholds={"COMM001.min_exposed_pct": 0.0},
                   window="all").to_json()["findings"]
    assert g["advice"] == ExposedCommunication.advice and g["has_compute"] is True


DESCHEDULED = 1_000_000  # ns the launching thread is switched out inside its launch call, in the planted variant


def _launch_call(path: Path) -> tuple[int, int, int]:
    """(start, end, globalTid) of the runtime call that launched the export's NCCL kernel."""
    con = sqlite3.connect(path)
    (row,) = con.execute("""SELECT r.start, r."end", r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                            JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'ncclKernel%'""").fetchall()
    con.close()
    return int(row[0]), int(row[1]), int(row[2])


def test_a_descheduled_launch_is_host_time_not_gpu_queue(tmp_path: Path) -> None:
    from tests.analysis.planting import ingested, sqlite_rw

    dst = copy_export(corpus_file(R1), tmp_path / "r1-desched.sqlite")
    start, end, tid = _launch_call(dst)
    con = sqlite_rw(dst)
    with con:
        cpu = con.execute("SELECT cpu FROM SCHED_EVENTS WHERE globalTid = ? LIMIT 1", [tid]).fetchone()[0]
        assert con.execute("SELECT COUNT(*) FROM SCHED_EVENTS WHERE globalTid = ? AND start BETWEEN ? AND ?",
                           [tid, start, end]).fetchone()[0] == 0  # the thread ran through its launch call
        con.execute("INSERT INTO SCHED_EVENTS (start, cpu, isSchedIn, globalTid) VALUES (?, ?, 0, ?), (?, ?, 1, ?)",
                    [start + 1000, cpu, tid, start + 1000 + DESCHEDULED, cpu, tid])
    con.close()
    out = analyze_run([ingested(corpus_file(R0)), ingest_copy(dst, tmp_path / "r1.duckdb")], labels=[R0, R1]).to_json()
    late = out["collectives"]["longest_launch_delay"]
    (k_start, _), (c_start, c_end, _) = _nccl(dst), _launch_call(dst)
    assert late["rank"] == 1 and late["gpu_queue_ns"] == k_start - c_start
    assert late["in_launch_call_ns"] == min(c_end, k_start) - c_start
    assert late["queued_after_call_ns"] == max(k_start - c_end, 0)
    assert late["descheduled_in_call_ns"] == DESCHEDULED
    from goodput_cli.render import text

    assert "of it with the thread switched out" in text(out)


TORCHRUN = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"
SENDRECV = "ncclDevKernel_SendRecv"


def _pair_rows(path: Path) -> dict[int, list[tuple[int, int]]]:
    """Per process (OS pid), its SendRecv kernels' (start, end) in order."""
    con = sqlite3.connect(path)
    rows = con.execute("""SELECT k.globalPid / 16777216 % 16777216, k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k
                          JOIN StringIds s ON s.id = k.shortName WHERE s.value = ? ORDER BY k.start""",
                       [SENDRECV]).fetchall()
    con.close()
    by: dict[int, list[tuple[int, int]]] = {}
    for pid, a, b in rows:
        by.setdefault(int(pid), []).append((int(a), int(b)))
    return by


def test_a_send_recv_pair_waits_for_its_peer_at_most_its_own_kernel(tmp_path: Path) -> None:
    """The torchrun pair (two processes in one export): each SendRecv instance waits for the peer, named, and
    never longer than its own kernel. Planted: pid 145's first SendRecv starts after pid 144's has ended (pid
    144's kernel finished into its peer's buffer), so pid 144's wait is its whole kernel and its transfer 0."""
    dst = copy_export(corpus_file(TORCHRUN), tmp_path / "late-peer.sqlite")
    by = _pair_rows(dst)
    assert sorted(by) == [144, 145]
    e4, s5 = by[144][0][1], by[145][0][0]
    shift = e4 - s5 + 1_000 if e4 > s5 else 0
    con = sqlite_rw(dst)
    with con:
        con.execute("""UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?, "end" = "end" + ? WHERE start = ?
                       AND globalPid / 16777216 % 16777216 = 145""", [shift, shift, s5])
    con.close()
    by = _pair_rows(dst)
    assert by[145][0][0] > by[144][0][1]  # the peer arrives after this rank's kernel ended
    out = analyze_run([ingest_copy(dst, tmp_path / "t.duckdb")], labels=["t"], window="all").to_json()
    c = out["collectives"]
    n = min(len(v) for v in by.values())
    want = {pid: [0, 0] for pid in by}
    for i in range(n):
        last = max(v[i][0] for v in by.values())
        for pid, v in by.items():
            s, e = v[i]
            w = min(last - s, e - s)
            want[pid][0] += w
            want[pid][1] += max(e - last, 0)
            assert w + max(e - last, 0) == e - s  # waiting + transfer = the kernel
    got = {p["pid"]: p for p in c["per_rank"]}
    assert {pid: [got[pid]["wait_ns"], got[pid]["transfer_ns"]] for pid in by} == want
    first = c["items"][0]
    assert first["kind"] == "point-to-point"
    r144 = next(r for r in first["ranks"] if r["rank"].endswith("pid 144"))
    assert r144["wait_ns"] == by[144][0][1] - by[144][0][0] and r144["transfer_ns"] == 0
    assert r144["waited_for"].endswith("pid 145")
    assert c["by_kind"] == {"point-to-point": {"instances": n, "wait_ns": sum(w for w, _ in want.values()),
                                               "transfer_ns": sum(x for _, x in want.values())}}


def test_send_recv_kernels_among_more_than_two_processes_are_not_split(tmp_path: Path) -> None:
    """Two copies of the torchrun export as one run: four processes run SendRecv kernels and no export names a
    kernel's peer, so they are not matched as if each waited for the last of four; the run says why."""
    from tests.analysis.planting import ingested

    a = ingested(corpus_file(TORCHRUN))
    out = analyze_run([a, ingest_copy(corpus_file(TORCHRUN), tmp_path / "b.duckdb")], labels=["a", "b"],
                      window="all").to_json()
    c = out["collectives"]
    n = min(len(v) for v in _pair_rows(corpus_file(TORCHRUN)).values())
    assert "per_rank" not in c and c["point_to_point_unmatched"]["kernels"] == [SENDRECV]
    assert c["point_to_point_unmatched"]["instances"] == n
    assert c["point_to_point_unmatched"]["reason"].startswith("4 processes run NCCL kernels")
    from goodput_cli.render import text

    assert f"== send/recv kernels not split ({SENDRECV}, {n} instance(s)): 4 processes" in text(out)
