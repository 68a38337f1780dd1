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
    # Each rank's line, its numbers the raw export's (``_expected``), in the terminal's durations.
    from analysis.fmt import duration as d

    for rank, other in (("rank 0", "rank 1"), ("rank 1", "rank 0")):
        w = want[rank]
        assert (f"   {rank} (nid001608): waiting {d(w['wait_ns'])} (for {other} {d(w['wait_ns'])}), transfer "
                f"{d(w['transfer_ns'])} of {d(w['time_ns'])} in {w['calls']} call(s)") in report.splitlines()


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


def _env_rank(con: sqlite3.Connection, rank: int) -> None:
    """Rewrite the captured environment's rank variables (0 in the corpus export) to ``rank``."""
    for table, where in (("StringIds", "TRUE"), ("TARGET_INFO_SYSTEM_ENV", "name = 'DeviceEnvironment'")):
        for sid, value in con.execute(f"SELECT rowid, value FROM {table} WHERE {where} "  # noqa: S608 - constants
                                      "AND instr(CAST(value AS BLOB), x'00') > 0").fetchall():
            for key in ("PMI_RANK", "PALS_RANKID", "SLURM_PROCID", "PMI_LOCAL_RANK", "SLURM_LOCALID"):
                value = value.replace(f"\x00{key}=0\x00", f"\x00{key}={rank}\x00")
            con.execute(f"UPDATE {table} SET value = ? WHERE rowid = ?", [value, sid])  # noqa: S608


def _string(con: sqlite3.Connection, value: str) -> int:
    row = con.execute("SELECT id FROM StringIds WHERE value = ?", [value]).fetchone()
    if row:
        return int(row[0])
    (top,) = con.execute("SELECT MAX(id) FROM StringIds").fetchone()
    con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", [top + 1, value])
    return int(top + 1)


def _three_ranks(folder: Path) -> list[Path]:
    """Three ranks from saxpy rank 0: every MPI_Send becomes an MPI_Allreduce that all three make, rank k
    arriving ``SHIFT[k][i % 3]`` of the call's duration late (the instance's last rank changes with i), all
    leaving when the original call ended; the MPI_Recv calls stay (point-to-point among three ranks)."""
    out = []
    for k in range(3):
        dst = copy_export(corpus_file(R0), folder / f"saxpy-allreduce-r{k}.sqlite")
        con = sqlite_rw(dst)
        with con:
            if k:
                _env_rank(con, k)
            red = _string(con, "MPI_Allreduce")
            sends = [(rowid, s, e) for rowid, s, e, n in _calls(dst) if n == "MPI_Send"]
            for i, (rowid, s, e) in enumerate(sends):
                con.execute('UPDATE NVTX_EVENTS SET textId = ?, start = ? WHERE rowid = ?',
                            [red, s + (e - s) * SHIFT[k][i % 3] // 100, rowid])
        con.close()
        out.append(dst)
    return out


SHIFT = ((0, 10, 0), (30, 0, 5), (60, 20, 0))  # percent of the call's duration, per rank and instance mod 3


def _allreduce_expected(paths: list[Path]) -> dict[str, dict[str, object]]:
    """Per rank: the Allreduce calls' time, waiting (from its arrival to the latest arrival before it left, named)
    and transfer, from the NVTX rows."""
    rows = []
    for p in paths:
        con = sqlite3.connect(p)
        rows.append(con.execute("""SELECT n.start, n."end" FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                                   WHERE s.value = 'MPI_Allreduce' ORDER BY n.start""").fetchall())
        con.close()
    out: dict[str, dict[str, object]] = {f"rank {k}": {"time": 0, "wait": 0, "whom": {}, "last": 0} for k in range(3)}
    for inst in zip(*rows, strict=True):
        out[f"rank {max(range(3), key=lambda j: inst[j][0])}"]["last"] += 1  # type: ignore[operator]
        for k, (s, e) in enumerate(inst):
            t, who = max((a, j) for j, (a, _) in enumerate(inst) if a < e)
            w = min(max(t - s, 0), e - s)
            o = out[f"rank {k}"]
            o["time"] += e - s  # type: ignore[operator]
            o["wait"] += w  # type: ignore[operator]
            if w:
                o["whom"][f"rank {who}"] = o["whom"].get(f"rank {who}", 0) + w  # type: ignore[union-attr]
    return out


def test_collectives_on_three_ranks_wait_for_the_last_arrival_and_point_to_point_is_left_out(
        tmp_path: Path) -> None:
    paths = _three_ranks(tmp_path)
    out = analyze_run([ingest_copy(p, tmp_path / f"r{k}.duckdb") for k, p in enumerate(paths)],
                      labels=["r0", "r1", "r2"], window="all").to_json()
    m = out["collectives"]["mpi"]
    want = _allreduce_expected(paths)
    (coll,) = m["collectives"]
    assert coll["call"] == "MPI_Allreduce" and coll["reason"] is None and coll["instances"] == m["instances"] == 10
    # the last to arrive changes with the instance (SHIFT): every instance's last rank is named
    assert coll["last_arrivals"] == {k: w["last"] for k, w in want.items() if w["last"]}
    assert len(coll["last_arrivals"]) == 2
    got = {p["rank"]: p for p in m["per_rank"]}
    for rank, w in want.items():
        assert got[rank]["collective_time_ns"] == w["time"]
        assert got[rank]["collective_wait_ns"] == w["wait"]
        assert got[rank]["collective_transfer_ns"] == w["time"] - w["wait"]  # type: ignore[operator]
        assert got[rank]["waited_for"] == w["whom"]
    assert m["critical"]["rank"] == "rank 2"
    assert m["critical"]["others_wait_ns"] == sum(w["whom"].get("rank 2", 0) for w in want.values())  # type: ignore[union-attr]
    # the run's verdict is told from the rank the others wait for, not "communication-bound"
    share = 100 * m["critical"]["others_wait_ns"] / sum(p["time_ns"] for p in m["per_rank"])
    assert m["critical"]["share_of_mpi_time_pct"] == pytest.approx(share, abs=1e-3) and share >= 10
    assert out["verdict"]["text"].startswith("Critical path: rank 2 on nid001608: the other ranks wait ")
    assert out["verdict"]["kind"] != "communication"
    item = m["collective_items"][0]
    assert item["call"] == "MPI_Allreduce" and item["last_rank"] == "rank 2"
    # point-to-point among three ranks: no peer recorded, left out with why, never matched
    assert m["matched"] == 0 and "3 ranks make MPI point-to-point calls and the exports record no peer" in m["reason"]
    left = {(x["rank"], x["call"]): x for x in m["left_out"]}
    assert {k: left[(k, "MPI_Recv")]["calls"] for k in got} == {k: 5 for k in got}
    from goodput_cli.render import text

    report = text(out)
    last = ", ".join(f"{k} x{w['last']}" for k, w in want.items() if w["last"])
    assert f"MPI_Allreduce: 10 instance(s) across rank 0, rank 1, rank 2; last to arrive: {last}" in report
    assert "left out: rank 0 MPI_Recv x5: 3 ranks make MPI point-to-point calls" in report


POST = 20_000  # a non-blocking call's own time (posting)


def _nonblocking_pair(folder: Path) -> tuple[Path, Path]:
    """Rank 0: in each iteration its first MPI_Send becomes MPI_Isend (posting only) and its second MPI_Waitall,
    its MPI_Recv an MPI_Sendrecv. Rank 1 mirrors it: an MPI_Irecv posted ``AHEAD`` before rank 0's Isend (never
    before its previous call ended) and an MPI_Wait from right after it until rank 0's Waitall ends (the wait for
    rank 0's Isend is in the Wait); its MPI_Sendrecv starts halfway through rank 0's (rank 0 waits for it)."""
    r0 = copy_export(corpus_file(R0), folder / "saxpy-nb-r0.sqlite")
    r1 = copy_export(corpus_file(R0), folder / "saxpy-nb-r1.sqlite")
    c0, c1 = sqlite_rw(r0), sqlite_rw(r1)
    with c0, c1:
        _env_rank(c1, 1)
        ids0 = {n: _string(c0, n) for n in ("MPI_Isend", "MPI_Waitall", "MPI_Sendrecv")}
        ids1 = {n: _string(c1, n) for n in ("MPI_Irecv", "MPI_Wait", "MPI_Sendrecv")}
        (prev,) = c1.execute("""SELECT n."end" FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                                WHERE s.value = 'MPI_Init'""").fetchone()
        calls = _calls(r0)
        i = 0
        while i < len(calls):
            rowid, s, e, name = calls[i]
            if name == "MPI_Send":
                rowid2, s2, e2, _ = calls[i + 1]
                c0.execute('UPDATE NVTX_EVENTS SET textId = ?, "end" = ? WHERE rowid = ?', [ids0["MPI_Isend"], s + POST, rowid])
                c0.execute('UPDATE NVTX_EVENTS SET textId = ? WHERE rowid = ?', [ids0["MPI_Waitall"], rowid2])
                post = max(s - AHEAD, prev)
                c1.execute('UPDATE NVTX_EVENTS SET textId = ?, start = ?, "end" = ? WHERE rowid = ?',
                           [ids1["MPI_Irecv"], post, post + POST, rowid])
                c1.execute('UPDATE NVTX_EVENTS SET textId = ?, start = ?, "end" = ? WHERE rowid = ?',
                           [ids1["MPI_Wait"], post + POST, e2, rowid2])
                prev = e2
                i += 2
                continue
            c0.execute('UPDATE NVTX_EVENTS SET textId = ? WHERE rowid = ?', [ids0["MPI_Sendrecv"], rowid])
            c1.execute('UPDATE NVTX_EVENTS SET textId = ?, start = ? WHERE rowid = ?',
                       [ids1["MPI_Sendrecv"], s + (e - s) // 2, rowid])
            prev = e
            i += 1
    c0.close()
    c1.close()
    return r0, r1


def _named(path: Path, names: tuple[str, ...]) -> list[tuple[int, int, str]]:
    con = sqlite3.connect(path)
    rows = con.execute(f"""SELECT n.start, n."end", s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                           WHERE s.value IN ({", ".join("?" for _ in names)}) ORDER BY n.start""",  # noqa: S608
                       list(names)).fetchall()
    con.close()
    return rows


def test_sendrecv_and_nonblocking_calls_wait_in_the_call_that_completes_them(tmp_path: Path) -> None:
    r0, r1 = _nonblocking_pair(tmp_path)
    out = analyze_run([ingest_copy(r0, tmp_path / "r0.duckdb"), ingest_copy(r1, tmp_path / "r1.duckdb")],
                      labels=["r0", "r1"], window="all").to_json()
    m = out["collectives"]["mpi"]
    isend, waits1 = _named(r0, ("MPI_Isend",)), _named(r1, ("MPI_Wait",))
    sr0, sr1 = _named(r0, ("MPI_Sendrecv",)), _named(r1, ("MPI_Sendrecv",))
    assert len(isend) == len(waits1) == len(sr0) == len(sr1) == 5
    # rank 1's Wait completes its Irecv: it waits from its start until rank 0 posts the Isend
    wait1 = sum(min(max(i[0] - w[0], 0), w[1] - w[0]) for i, w in zip(isend, waits1, strict=True))
    # rank 0's Sendrecv waits until rank 1's Sendrecv starts (its receive's send, its send's receive)
    wait0 = sum(min(max(b[0] - a[0], 0), a[1] - a[0]) for a, b in zip(sr0, sr1, strict=True))
    got = {p["rank"]: p for p in m["per_rank"]}
    assert wait1 > 0 and wait0 > 0
    assert got["rank 1"]["wait_ns"] == wait1 and got["rank 1"]["waited_for"] == {"rank 0": wait1}
    assert got["rank 0"]["wait_ns"] == wait0 and got["rank 0"]["waited_for"] == {"rank 1": wait0}
    calls0 = _named(r0, ("MPI_Isend", "MPI_Waitall", "MPI_Sendrecv"))
    assert got["rank 0"]["calls"] == len(calls0) == 15
    assert got["rank 0"]["time_ns"] == sum(e - s for s, e, _ in calls0)
    assert got["rank 0"]["transfer_ns"] == got["rank 0"]["time_ns"] - wait0
    # both directions: 5 Isend + 5 Sendrecv one way, 5 Sendrecv the other
    by = {(d["sender"], d["receiver"]): d for d in m["directions"]}
    assert by[("rank 0", "rank 1")]["matched"] == 10 and by[("rank 1", "rank 0")]["matched"] == 5
    assert m["matched"] == 15 and not m["left_out"]
    longest = max(m["longest_waits"], key=lambda w: w["wait_ns"])
    assert longest["call"] in ("MPI_Wait", "MPI_Sendrecv")


def test_a_request_no_wait_completes_leaves_its_direction_out(tmp_path: Path) -> None:
    r0, r1 = _nonblocking_pair(tmp_path)
    con = sqlite_rw(r1)
    with con:  # rank 1's last MPI_Wait is gone: its Irecv never completes in the capture
        con.execute("""DELETE FROM NVTX_EVENTS WHERE rowid = (SELECT MAX(n.rowid) FROM NVTX_EVENTS n JOIN StringIds s
                       ON s.id = n.textId WHERE s.value = 'MPI_Wait')""")
    con.close()
    out = analyze_run([ingest_copy(r0, tmp_path / "r0.duckdb"), ingest_copy(r1, tmp_path / "r1.duckdb")],
                      labels=["r0", "r1"], window="all").to_json()
    m = out["collectives"]["mpi"]
    by = {(d["sender"], d["receiver"]): d for d in m["directions"]}
    assert by[("rank 0", "rank 1")]["matched"] == 0
    assert by[("rank 0", "rank 1")]["reason"] == "1 non-blocking request(s) with no MPI_Wait/MPI_Waitall after them in the capture"
    assert by[("rank 1", "rank 0")]["matched"] == 5
    left = {(x["rank"], x["call"]) for x in m["left_out"]}
    assert ("rank 1", "MPI_Irecv") in left and ("rank 0", "MPI_Isend") in left
