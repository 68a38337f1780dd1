"""Nested loops of data-dependent length (issue #39, class 4): the outer iterations are the loop's, the inner
loop is structure inside them (``analysis.loops.nested``).

Planted: a real export's GPU work replaced by outer iterations that each launch a preamble, then an inner
loop of two kernels a varying number of times, then a closing kernel; no period covers that work, and
before nested loops were read it was called one-shot. Corpus: devsync-heavy, whose label counts 165 outer
iterations (find_most_negative) around 2,173 inner ones (solve_1bc_kernel), each count checked by SQL on the
raw export.
"""

from __future__ import annotations

import random
from pathlib import Path

from analysis.api import analyze
from analysis.loops.phases import find_loop, phase_info, phase_of
from analysis.model.trace import Trace
from tests.analysis.planting import (
    GPU_TABLES,
    clone_row,
    copy_export,
    has_table,
    ingest_copy,
    ingested,
    sqlite_rw,
)
from tests.analysis.planting import corpus_rows as _raw
from tests.conftest import corpus_file

BASE = "cloverleaf-devsync.sqlite"
GAP = 2_000          # ns between two kernels
MS = 1_000_000


def _plant_nested(path: Path, trips: list[int]) -> dict:
    """Replace the export's GPU work by ``len(trips)`` outer iterations: kernels P0 P1, then (I0 I1) x trips[i],
    then P2, each kernel a distinct one of the export's. Returns the planted starts and counts."""
    con = sqlite_rw(path)
    rows = con.execute('SELECT rowid, demangledName, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start').fetchall()
    body, seen = [], set()
    for rowid, name, dur in rows:
        if name not in seen and dur > 0:
            seen.add(name)
            body.append((rowid, min(int(dur), 50_000)))
        if len(body) == 5:
            break
    end_all = max(int(con.execute(f'SELECT MAX("end") FROM "{t}"').fetchone()[0] or 0)  # noqa: S608 - constants
                  for t in GPU_TABLES if has_table(con, t))
    p0, p1, i0, i1, p2 = body
    starts, t = [], end_all + 50 * MS
    with con:
        keep = ", ".join(str(r) for r, _ in body)
        for table in GPU_TABLES:
            if has_table(con, table):
                con.execute(f"DELETE FROM {table} WHERE rowid NOT IN ({keep})"  # noqa: S608 - integers
                            if table == "CUPTI_ACTIVITY_KIND_KERNEL" else f"DELETE FROM {table}")  # noqa: S608
        for n in trips:
            starts.append(t)
            for rowid, dur in [p0, p1, *([i0, i1] * n), p2]:
                clone_row(con, "CUPTI_ACTIVITY_KIND_KERNEL", rowid, start=t, end=t + dur)
                t += dur + GAP
            t += 200_000     # the host decides on the next outer iteration
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN ({keep})")  # noqa: S608 - integers
    con.close()
    return {"starts": starts, "last_end": t - 200_000 - GAP}


def test_planted_nested_loop_counts_the_outer_iterations(tmp_path) -> None:
    trips = [random.Random(i).randint(2, 9) for i in range(24)]
    assert len(set(trips)) > 3     # data-dependent: no period covers the work
    src = copy_export(corpus_file(BASE), tmp_path / "nested.sqlite")
    facts = _plant_nested(src, trips)
    out = ingest_copy(src, tmp_path / "nested.duckdb")
    trace = Trace(out, "nested")
    try:
        loop = find_loop(trace)
        assert len(loop) == len(trips)
        assert loop.starts.tolist() == facts["starts"]
        assert int(loop.ends[-1]) == facts["last_end"]
        inner = loop.detail["inner"]
        assert loop.detail["nested"] and inner["period_ops"] == 2
        assert inner["iterations"] == sum(trips) and inner["runs"] == len(trips)
        # Iterations of different work are not warm-up: the steady phase starts with the first one.
        steady = phase_of(phase_info(trace).phases, "steady")
        assert steady is not None and steady.start_ns == facts["starts"][0]
    finally:
        trace.close()
    result = analyze([out], labels=["nested"]).to_json()
    assert result["reports"][0]["iterations"]["count"] == len(trips)
    assert result["reports"][0]["iterations"]["program"] == "loop"


def test_devsync_heavy_is_165_outer_iterations_around_2173_inner_ones() -> None:
    short = "devsync-heavy-report13.sqlite"
    counts = dict(_raw(short, """SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                 JOIN StringIds s ON s.id = k.shortName GROUP BY s.value"""))
    first = _raw(short, """SELECT MIN(k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                           WHERE s.value = 'find_most_negative'""")[0][0]
    assert counts["find_most_negative"] == 165 and counts["solve_1bc_kernel"] == counts["reset_d_changed"] == 2173
    trace = Trace(ingested(corpus_file(short)), short)
    try:
        loop = find_loop(trace)
        assert len(loop) == counts["find_most_negative"]
        assert int(loop.starts[0]) == first
        assert loop.detail["outer_opened_by"].startswith("find_most_negative")
        inner = loop.detail["inner"]
        assert inner["opened_by"].startswith("reset_d_changed") and inner["iterations"] == counts["reset_d_changed"]
        # One inner run per check_Rk (the solve's convergence check after each run).
        assert inner["runs"] == counts["check_Rk"]
    finally:
        trace.close()
