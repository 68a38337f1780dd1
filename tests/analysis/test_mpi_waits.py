"""Blocking MPI sends and receives split into waiting for the peer and transfer, on a two-rank MPI run built
from the corpus' saxpy rank 0 (the corpus has no rank 1): rank 1 is a copy of it with its rank in the captured
environment and its MPI ranges mirrored: each send of rank 0 is a receive of rank 1, posted up to
``AHEAD`` before the send starts (never before rank 1's previous call ended) and ending when the send ends, so
rank 1 waits for rank 0's host work; each receive of rank 0 is a send of rank 1 starting halfway through it.
Expected numbers from the planted exports' NVTX rows, read with SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from analysis.run.runner import analyze_run
from tests.analysis.planting import copy_export, ingest_copy, ingested, sqlite_rw
from tests.conftest import corpus_file

R0 = "saxpy-mpi-rank0-perlmutter.sqlite"
AHEAD = 30_000_000


def _calls(path: Path) -> list[tuple[int, int, int, str]]:
    con = sqlite3.connect(path)
    rows = con.execute("""SELECT n.rowid, n.start, n."end", s.value FROM NVTX_EVENTS n JOIN StringIds s
                          ON s.id = n.textId WHERE s.value IN ('MPI_Send', 'MPI_Recv') ORDER BY n.start""").fetchall()
    con.close()
    return rows


def _rank1(dst: Path, drop_receive: bool = False) -> Path:
    copy_export(corpus_file(R0), dst)
    con = sqlite_rw(dst)
    with con:
        for table, where in (("StringIds", "TRUE"), ("TARGET_INFO_SYSTEM_ENV", "name = 'DeviceEnvironment'")):
            for sid, value in con.execute(f"SELECT rowid, value FROM {table} WHERE {where} "  # noqa: S608 - constants
                                          "AND instr(CAST(value AS BLOB), x'00') > 0").fetchall():
                for key in ("PMI_RANK", "PALS_RANKID", "SLURM_PROCID", "PMI_LOCAL_RANK", "SLURM_LOCALID"):
                    value = value.replace(f"\x00{key}=0\x00", f"\x00{key}=1\x00")
                con.execute(f"UPDATE {table} SET value = ? WHERE rowid = ?", [value, sid])  # noqa: S608
        ids = dict(con.execute("SELECT value, id FROM StringIds WHERE value IN ('MPI_Send', 'MPI_Recv')").fetchall())
        (prev,) = con.execute("""SELECT n."end" FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                                 WHERE s.value = 'MPI_Init'""").fetchone()
        for rowid, start, end, name in _calls(dst):
            if name == "MPI_Send":  # rank 1 receives it: posted early, done when the send is
                new = (ids["MPI_Recv"], max(start - AHEAD, prev), end)
            else:  # rank 1 sends what rank 0 receives, halfway through rank 0's receive
                new = (ids["MPI_Send"], start + (end - start) // 2, end)
            con.execute('UPDATE NVTX_EVENTS SET textId = ?, start = ?, "end" = ? WHERE rowid = ?', [*new, rowid])
            prev = new[2]
        if drop_receive:
            con.execute("""DELETE FROM NVTX_EVENTS WHERE rowid = (SELECT MAX(n.rowid) FROM NVTX_EVENTS n
                           WHERE n.textId = ?)""", [ids["MPI_Recv"]])
    con.close()
    return dst


def _expected(r0: Path, r1: Path) -> dict[str, dict[str, int]]:
    """Per rank: calls, time, waiting and transfer, from the k-th send of one with the k-th receive of the other
    (both exports on one clock: the copy keeps rank 0's session start)."""
    calls = {"rank 0": _calls(r0), "rank 1": _calls(r1)}
    out = {r: {"calls": 0, "time_ns": 0, "wait_ns": 0, "transfer_ns": 0} for r in calls}
    for a, b in (("rank 0", "rank 1"), ("rank 1", "rank 0")):
        sends = [(s, e) for _, s, e, n in calls[a] if n == "MPI_Send"]
        recvs = [(s, e) for _, s, e, n in calls[b] if n == "MPI_Recv"]
        assert len(sends) == len(recvs)
        for (ss, se), (rs, re_) in zip(sends, recvs, strict=True):
            for who, (s, e), other in ((a, (ss, se), rs), (b, (rs, re_), ss)):
                w = min(max(other - s, 0), e - s) if other < e else 0  # a call that ended first waited for nobody
                out[who]["calls"] += 1
                out[who]["time_ns"] += e - s
                out[who]["wait_ns"] += w
                out[who]["transfer_ns"] += e - s - w
    return out


def _waiting_intervals(r0: Path, r1: Path) -> dict[str, list[tuple[int, int]]]:
    """Per rank, the waiting of each matched call as ``[start, start + wait)`` (the rule of ``_expected``)."""
    calls = {"rank 0": _calls(r0), "rank 1": _calls(r1)}
    out: dict[str, list[tuple[int, int]]] = {r: [] for r in calls}
    for a, b in (("rank 0", "rank 1"), ("rank 1", "rank 0")):
        sends = [(s, e) for _, s, e, n in calls[a] if n == "MPI_Send"]
        recvs = [(s, e) for _, s, e, n in calls[b] if n == "MPI_Recv"]
        for (ss, se), (rs, re_) in zip(sends, recvs, strict=True):
            for who, (s, e), other in ((a, (ss, se), rs), (b, (rs, re_), ss)):
                w = min(max(other - s, 0), e - s) if other < e else 0
                if w:
                    out[who].append((s, s + w))
    return out


def _idle_inside(path: Path, spans: list[tuple[int, int]]) -> int:
    """The GPU idle (between the device's first and last operation, outside every kernel, copy and memset) inside
    ``spans`` and outside the CUDA calls of the MPI calls' thread, from the raw export."""
    con = sqlite3.connect(path)
    ops = sorted(con.execute("""SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                                SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
                                SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMSET""").fetchall())
    (tid,) = con.execute("""SELECT DISTINCT n.globalTid FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                            WHERE s.value = 'MPI_Send'""").fetchone()
    api = con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ?', [tid]).fetchall()
    con.close()
    idle, reach = [], ops[0][1]
    for s, e in ops[1:]:
        if s > reach:
            idle.append((reach, s))
        reach = max(reach, e)
    total = 0
    for ws, we in spans:
        for gs, ge in idle:
            lo, hi = max(ws, gs), min(we, ge)
            if hi <= lo:
                continue
            # less the CUDA calls inside (none in this export: asserted)
            assert not any(a < hi and b > lo for a, b in api)
            total += hi - lo
    return total


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return corpus_file(R0), _rank1(tmp_path_factory.mktemp("mpi") / "saxpy-rank1.sqlite")


def test_a_receive_waiting_for_the_senders_host_work_is_waiting_not_communication(pair: tuple[Path, Path],
                                                                                  tmp_path: Path) -> None:
    r0, r1 = pair
    out = analyze_run([ingested(r0), ingest_copy(r1, tmp_path / "r1.duckdb")], labels=["r0", "r1"],
                      window="all").to_json()
    m = out["collectives"]["mpi"]
    want = _expected(r0, r1)
    got = {p["rank"]: p for p in m["per_rank"]}
    for rank, w in want.items():
        assert {k: got[rank][k] for k in w} == w
    assert got["rank 1"]["waited_for"] == {"rank 0": want["rank 1"]["wait_ns"]}
    assert got["rank 0"]["waited_for"] == {"rank 1": want["rank 0"]["wait_ns"]}
    assert m["matched"] == 15 and all(d["reason"] is None for d in m["directions"])
    # rank 1's receives wait for rank 0's host work: rank 0 is the critical path, and the verdict says so,
    # told from rank 0's own bound (its host), not "communication-bound"
    assert want["rank 1"]["wait_ns"] > want["rank 0"]["wait_ns"]
    crit = m["critical"]
    assert crit["rank"] == "rank 0" and crit["others_wait_ns"] == want["rank 1"]["wait_ns"]
    total = sum(w["time_ns"] for w in want.values())
    assert crit["share_of_mpi_time_pct"] == pytest.approx(100 * want["rank 1"]["wait_ns"] / total, abs=1e-3)
    v = out["verdict"]
    assert v["text"].startswith("Critical path: rank 0 on nid001608: the other rank waits")
    assert v["kind"] != "communication"
    longest = m["longest_waits"][0]
    assert longest["rank"] == "rank 1" and longest["call"] == "MPI_Recv" and longest["waited_for"] == "rank 0"
    # HOST003 on rank 1: its impact leaves out the GPU idle inside the waiting for rank 0 (equal to SQL)
    rep1 = next(r for r in out["reports"] if r["rank"] == 1)
    host003 = [f for f in rep1["findings"] if f["rule_id"] == "HOST003"]
    assert len(host003) == 1
    f = host003[0]
    assert f["mpi_waiting_ns"] == want["rank 1"]["wait_ns"] and f["mpi_waited_for"] == {"rank 0": f["mpi_waiting_ns"]}
    cut = _idle_inside(r1, _waiting_intervals(r0, r1)["rank 1"])
    assert cut > 0
    assert f["mpi_waiting_idle_ns"] == cut
    assert f["impact_ns"] == f["impact_with_waiting_ns"] - cut
    assert "is that rank's work and is left out of this impact" in f["message"]
    from goodput_cli.render import text

    report = text(out)
    assert "== MPI across ranks: 15 message(s) and 0 collective instance(s) matched" in report
    assert "rank 1 (nid001608): waiting " in report


def test_messages_that_do_not_pair_in_order_are_not_matched(pair: tuple[Path, Path], tmp_path: Path) -> None:
    r0, _ = pair
    r1 = _rank1(tmp_path / "saxpy-rank1-short.sqlite", drop_receive=True)
    out = analyze_run([ingested(r0), ingest_copy(r1, tmp_path / "r1.duckdb")], labels=["r0", "r1"],
                      window="all").to_json()
    m = out["collectives"]["mpi"]
    by = {(d["sender"], d["receiver"]): d for d in m["directions"]}
    sends = sum(1 for *_, n in _calls(r0) if n == "MPI_Send")
    assert by[("rank 0", "rank 1")]["matched"] == 0
    assert by[("rank 0", "rank 1")]["reason"] == f"{sends} send(s) against {sends - 1} receive(s) over the capture"
    assert by[("rank 1", "rank 0")]["matched"] == by[("rank 1", "rank 0")]["sends"] == 5
