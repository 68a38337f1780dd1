"""Two ranks of one node on the same CPUs are flagged, with each rank's time there, from the scheduler events.

The run: four ranks built from the corpus' two-node NCCL pair (``tests.analysis.many_ranks``): ranks 0 and 2
are copies of the ault43 export, 1 and 3 of the ault44 one, so each node holds two ranks whose threads run on
the same logical CPUs (0 and 128), as the expert saw in a nine-rank job. The control moves rank 2's scheduler
events to other CPUs. Expected numbers from the planted exports' ``SCHED_EVENTS``, read with SQLite."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.run.cpus import FEW, MOST
from analysis.run.runner import analyze_run
from tests.analysis.many_ranks import build_rank
from tests.analysis.planting import ingest_copy, sqlite_rw


def _on_cpu(path: Path) -> dict[int, int]:
    """Per logical CPU, the time the threads of the export's CUDA processes ran there: from each switch-in to the
    thread's next switch-out that is followed by a switch-in (a stretch whose end is known), on that
    switch-out's CPU."""
    con = sqlite3.connect(path)
    rows = con.execute("""SELECT globalTid, start, isSchedIn, cpu FROM SCHED_EVENTS WHERE globalTid IS NOT NULL
                          AND globalTid / 16777216 % 16777216 IN (SELECT DISTINCT globalTid / 16777216 % 16777216
                                                                  FROM CUPTI_ACTIVITY_KIND_RUNTIME)
                          ORDER BY globalTid, start, isSchedIn DESC""").fetchall()
    con.close()
    by: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for tid, start, is_in, cpu in rows:
        by[tid].append((start, is_in, cpu))
    out: dict[int, int] = defaultdict(int)
    for events in by.values():
        back = None  # when the thread last came back on CPU after a recorded stretch off it
        for (start, is_in, cpu), nxt in zip(events, [*events[1:], None], strict=True):
            if is_in or nxt is None or not nxt[1]:
                continue  # an off-CPU stretch is a switch-out followed by a switch-in
            if back is not None and start > back:
                out[cpu] += start - back
            back = nxt[0]
    return dict(out)


def _confined(on: dict[int, int]) -> tuple[list[int], int, int]:
    total = sum(on.values())
    held, cpus = 0, []
    for c in sorted(on, key=lambda c: (-on[c], c)):
        cpus.append(c)
        held += on[c]
        if held >= MOST * total:
            break
    return sorted(cpus), held, total


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shared")
    return [build_rank(folder / f"rank{k}.sqlite", k, 4, collectives=2) for k in range(4)]


def test_two_ranks_of_a_node_on_the_same_cpus_are_flagged(ranks: list[Path], tmp_path: Path) -> None:
    out = analyze_run([ingest_copy(p, tmp_path / f"{p.stem}.duckdb") for p in ranks], labels=[p.name for p in ranks],
                      window="all").to_json()
    got = {w["host"]: w for w in out["run_warnings"] if w["code"] == "shared_cpu"}
    assert sorted(got) == ["ault43.cscs.ch", "ault44.cscs.ch"]
    for host, pair in (("ault43.cscs.ch", (0, 2)), ("ault44.cscs.ch", (1, 3))):
        w = got[host]
        assert w["ranks"] == list(pair)
        want = {f"rank {k}": _confined(_on_cpu(ranks[k])) for k in pair}
        for k in pair:
            assert len(want[f"rank {k}"][0]) <= FEW
        assert w["cpus"] == sorted({c for cpus, _, _ in want.values() for c in cpus})
        assert {r["name"]: (r["cpus"], r["on_these_cpus_ns"], r["on_any_cpu_ns"]) for r in w["per_rank"]} == want
        assert w["message"].startswith(f"2 ranks of host {host} run on the same logical CPUs ")
        # the layout the export records (CpuInfo: each logical CPU's socket), quoted; no core is assumed
        con = sqlite3.connect(ranks[pair[0]])
        (info,) = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CpuInfo'").fetchone()
        con.close()
        sockets = {i["cpuid"]: i["socket"] for i in json.loads(info)["items"]}
        assert w["cpu_layout"] == {"logical_cpus": len(sockets), "sockets": {str(c): sockets[c] for c in w["cpus"]}}
        socks = sorted({sockets[c] for c in w["cpus"]})
        on = f"socket {socks[0]}" if len(socks) == 1 else f"sockets {', '.join(map(str, socks))}"
        assert (f"logical CPUs {', '.join(map(str, w['cpus']))} ({on}; the host has {len(sockets)} logical CPUs as the "
                "export records them, which does not say which share a core)") in w["message"]
        assert "hardware thread" not in w["message"] and "core)" in w["message"]
    from goodput_cli.render import text

    assert "WARNING (shared_cpu): 2 ranks of host ault43.cscs.ch run on the same logical CPUs" in text(out)


def test_ranks_of_a_node_on_other_cpus_are_not_flagged(ranks: list[Path], tmp_path: Path) -> None:
    moved = tmp_path / "rank2-moved.sqlite"
    moved.write_bytes(ranks[2].read_bytes())
    con = sqlite_rw(moved)
    with con:
        con.execute("UPDATE SCHED_EVENTS SET cpu = cpu + 1")
    con.close()
    paths = [ranks[0], ranks[1], moved, ranks[3]]
    out = analyze_run([ingest_copy(p, tmp_path / f"{p.stem}.duckdb") for p in paths], labels=[p.name for p in paths],
                      window="all").to_json()
    assert [w["host"] for w in out.get("run_warnings") or [] if w["code"] == "shared_cpu"] == ["ault44.cscs.ch"]


def test_without_a_recorded_layout_the_warning_speaks_of_logical_cpu_ids_only() -> None:
    from analysis.readers.nsys.guard import cpu_layout as read_layout
    from analysis.run.cpus import shared_cpu_warnings

    assert read_layout(None) == {} and read_layout("not json") == {} and read_layout('{"items": [{"cpuid": 0}]}') == {}
    assert read_layout('{"items": [{"cpuid": 1, "socket": 0}, {"cpuid": 0, "socket": 0}, {"cpuid": 2, "socket": 1}]}') \
        == {"cpu_logical": "3", "cpu_sockets": "0-1:0,2-2:1"}
    rows = [{"pid": 1, "cpu": 3, "on_ns": 9_000_000}, {"pid": 1, "cpu": 4, "on_ns": 100_000}]
    (w,) = shared_cpu_warnings([("a", 0, "h", rows, {}), ("b", 1, "h", rows, {})])
    assert w["cpus"] == [3] and w["cpu_layout"] is None
    assert "same logical CPU 3 (the scheduler's numbers; the export records no CPU layout)" in w["message"]
