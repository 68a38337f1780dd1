"""Roll-ups are wall time: the corpus 2-node pair's start-up (PHASE001 on both ranks) costs the run the union
of the two ranks' start-ups on the aligned clock, not their sum; GPU-time rules stay sums, labelled so."""

from __future__ import annotations

from analysis.run.runner import analyze_run
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

R0 = "nccl-ring-2node-r0-ault43.sqlite"
R1 = "nccl-ring-2node-r1-ault44.sqlite"


def test_startup_is_wall_time_on_the_aligned_clock() -> None:
    out = analyze_run([ingested(corpus_file(n)) for n in (R0, R1)], labels=[R0, R1]).to_json()
    (f,) = [f for f in out["findings"] if f["rule_id"] == "PHASE001"]
    spans = []
    for r in out["reports"]:
        (ph,) = [p for p in r["phases"] if p["name"] == "startup"]
        spans.append((r["session_start_utc_ns"] + ph["start_ns"], r["session_start_utc_ns"] + ph["end_ns"]))
    (a0, b0), (a1, b1) = sorted(spans)
    assert a1 < b0  # the ranks start up together
    union = max(b0, b1) - a0
    assert f["impact_basis"] == "wall_time_aligned" and f["impact_ns"] == union
    assert f["impact_summed_ns"] == (b0 - a0) + (b1 - a1) > union
    assert sum(r["impact_ns"] for r in f["per_rank"]) == f["impact_summed_ns"]
    gpu = [g for g in out["findings"] if g.get("per_rank") and g["rule_id"] != "PHASE001"]
    assert gpu and all(g["impact_basis"] == "gpu_time_summed_over_ranks" and g["impact_ns"] == g["impact_summed_ns"]
                       for g in gpu)
