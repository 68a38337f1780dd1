"""GPU002's premise (the host pacing its launches: short gaps between operations it issues), checked on the
evidence: between unified-memory migrations the driver issues, or around a single operation, the gaps are not
launch overhead, and the finding says so and never leads the verdict."""

from __future__ import annotations

import duckdb

from analysis.api import analyze
from tests.analysis.planting import ingest_copy
from tests.conftest import corpus_file


def _gpu002(path, tmp_path):
    trace = ingest_copy(path, tmp_path / "t.duckdb")
    result = analyze([trace], window="all").to_json()
    (finding,) = [f for f in result["findings"] if f["rule_id"] == "GPU002"]
    return trace, finding, result


def _direct_counts(trace, evidence) -> tuple[int, int]:
    """Operations starting in each evidence region, by plain SQL on the normalized file (an independent query)."""
    con = duckdb.connect(str(trace), read_only=True)
    launched = migrations = 0
    try:
        for ev in evidence:
            lo, hi, device = ev["start_ns"], ev["end_ns"], ev["device"]
            for table in ("kernels", "memset"):
                launched += con.execute(f"SELECT COUNT(*) FROM {table} WHERE start_ns >= ? AND start_ns < ? "  # noqa: S608
                                        "AND device IS NOT DISTINCT FROM ?", [lo, hi, device]).fetchone()[0]
            uvm, other = con.execute("SELECT COUNT(*) FILTER (WHERE copy_kind LIKE 'UVM%'), "
                                     "COUNT(*) FILTER (WHERE copy_kind NOT LIKE 'UVM%') FROM memcpy "
                                     "WHERE start_ns >= ? AND start_ns < ? AND device IS NOT DISTINCT FROM ?",
                                     [lo, hi, device]).fetchone()
            launched, migrations = launched + other, migrations + uvm
    finally:
        con.close()
    return launched, migrations


def test_idle_between_unified_memory_migrations_is_not_launch_overhead(tmp_path) -> None:
    trace, f, result = _gpu002(corpus_file("stdpar-um-gpu.sqlite"), tmp_path)  # 3 launches, 813 migrations
    assert f["evidence_total"] == len(f["evidence"])          # every region is in the evidence: counts are whole
    assert (f["host_launched_ops"], f["uvm_migrations"]) == _direct_counts(trace, f["evidence"])
    assert f["uvm_migrations"] > f["host_launched_ops"]
    assert f["premise_holds"] is False and "does not hold" in f["message"]
    assert "not between launches" in f["premise"] or "no gap between two launches" in f["premise"]
    assert (result.get("verdict") or {}).get("rule_id") != "GPU002"


def test_a_loop_of_launches_holds_the_premise(tmp_path) -> None:
    trace, f, _ = _gpu002(corpus_file("cupy-power-iteration.sqlite"), tmp_path)
    shown = f["evidence"]
    launched, migrations = _direct_counts(trace, shown)
    assert migrations == 0 and launched >= 2
    assert f["premise_holds"] is True and f["host_launched_ops"] >= launched   # the evidence shows the top regions


def test_the_counts_are_the_same_whatever_number_of_regions_a_query_holds(tmp_path, monkeypatch) -> None:
    from analysis.diagnosis.rules.nsys import gpu

    monkeypatch.setattr(gpu, "REGIONS_PER_QUERY", 1)  # a statement per region: the chunks' sums add up
    trace, f, _ = _gpu002(corpus_file("stdpar-um-gpu.sqlite"), tmp_path)
    assert f["evidence_total"] == len(f["evidence"]) > 1
    assert (f["host_launched_ops"], f["uvm_migrations"]) == _direct_counts(trace, f["evidence"])
