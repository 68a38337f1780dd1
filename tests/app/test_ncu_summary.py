"""What the metadata DB keeps of an ncu report's kernels: one story per configuration, bounded, exact counts."""

from __future__ import annotations

from app.services.jobs.ncu_summary import MAX_STORED, compact_report


def k(name: str, grid: int, dur: float, nsys: int | None = None) -> dict:
    return {"name": name, "grid": [grid, 1, 1], "block": [128, 1, 1], "duration_ns": dur, "nsys_total_ns": nsys,
            "memory": {"levels": [], "tag": f"{name}-{grid}-{dur}"}}


def test_one_entry_per_configuration_with_its_longest_launch():
    data = {"tool": "ncu", "kernels": [k("a", 1, 5.0), k("a", 1, 9.0), k("a", 2, 1.0), k("b", 1, 3.0, nsys=10_000)]}
    out = compact_report(data)
    assert out["kernels_total"] == 4 and out["kernel_configs_total"] == 3
    # nsys time first (b), then profiled time: a/1 (14 ns over 2 launches), a/2
    assert [(e["name"], e["grid"][0], e["launches"], e["profiled_ns"]) for e in out["kernels"]] == [
        ("b", 1, 1, 3.0), ("a", 1, 2, 14.0), ("a", 2, 1, 1.0)]
    assert out["kernels"][1]["memory"]["tag"] == "a-1-9.0"   # the longest launch's story
    assert data["kernels"][0]["memory"]["tag"] == "a-1-5.0"  # the input is not modified


def test_bounded_and_untouched_without_kernels():
    out = compact_report({"kernels": [k("x", g, float(g)) for g in range(MAX_STORED + 5)]})
    assert len(out["kernels"]) == MAX_STORED and out["kernel_configs_total"] == MAX_STORED + 5
    assert out["kernels"][0]["grid"][0] == MAX_STORED + 4
    nsys = {"tool": "nsys", "span_ns": 5}
    assert compact_report(nsys) is nsys
