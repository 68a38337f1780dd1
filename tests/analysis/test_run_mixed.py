"""A mixed run is flagged: the corpus 2-node pair plus an unrelated export (pipit's MPI saxpy, rank 0 of
another job, two years earlier), and the pair's rank 0 alone (its rank 1 missing)."""

from __future__ import annotations

from analysis.run.mixed import run_warnings
from analysis.run.runner import analyze_run
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

R0 = "nccl-ring-2node-r0-ault43.sqlite"
R1 = "nccl-ring-2node-r1-ault44.sqlite"
SAXPY = "saxpy-mpi-rank0-perlmutter.sqlite"


def test_an_unrelated_export_and_a_duplicate_rank_are_named() -> None:
    from goodput_cli.render import text

    out = analyze_run([ingested(corpus_file(n)) for n in (R0, R1, SAXPY)], labels=[R0, R1, SAXPY]).to_json()
    by = {w["code"]: w for w in out["run_warnings"]}
    assert set(by) == {"jobs_differ", "duplicate_rank", "clock_apart"}
    assert by["duplicate_rank"]["ranks"] == [0] and sorted(by["duplicate_rank"]["reports"]) == [R0, SAXPY]
    assert by["clock_apart"]["reports"] == [SAXPY]  # the pair overlaps; the saxpy run lies years away
    reps = {r["file"]: r for r in out["reports"]}
    gap = (reps[R0]["session_start_utc_ns"] + min(p["start_ns"] for p in reps[R0]["phases"])
           - reps[SAXPY]["session_start_utc_ns"] - max(p["end_ns"] for p in reps[SAXPY]["phases"]))
    assert gap > 365 * 86400 * 10**9
    jobs = {r["job_id"] for r in out["reports"]}
    assert len(jobs) == 2 and all(str(j) in by["jobs_differ"]["message"] for j in jobs)
    report = text(out)
    assert "WARNING (clock_apart): " + SAXPY in report and "WARNING (duplicate_rank): Rank 0" in report


def test_a_missing_rank_is_named_and_a_whole_pair_is_quiet() -> None:
    out = analyze_run([ingested(corpus_file(n)) for n in (R0, R1)], labels=[R0, R1]).to_json()
    assert "run_warnings" not in out  # one job, both ranks, overlapping on the clock
    info = [dict(r) for r in out["reports"]]
    info[1] = {**info[1], "rank": 7, "world_size": 9}
    info[0] = {**info[0], "world_size": 9}
    (w,) = [w for w in run_warnings(info) if w["code"] == "missing_ranks"]
    assert w["ranks"] == [1, 2, 3, 4, 5, 6, 8] and "rank(s) 1-6, 8" in w["message"]
