"""Every idle nanosecond has exactly one owner, per device, on every corpus export: the time rules claim by what
the host was doing (``owns_idle``: the idle anatomy's categories) plus what each gap's structural owner keeps
(GPU001, KRN001, unowned) equals that device's idle computed directly in SQL (NVIDIA's pairing)."""

from __future__ import annotations

import pytest

from analysis.diagnosis.rules.nsys.gaps import owned
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.analysis.test_rules_corpus import ALL_GAPS, IDS, PAIRING_CTE
from tests.conftest import NSYS_FILES

PER_DEVICE_GAPS_SQL = PAIRING_CTE + "SELECT pid, device, SUM(end_ns - start_ns) FROM gaps GROUP BY ALL"  # noqa: S608 - constants

# Which categories each rule owns: one owner per category, and the old precedence's rules among them.
EXPECTED_OWNERS = {"SYNC001": ("sync",), "MEM002": ("sync_copy", "memset"), "MEM006": ("allocation",),
                   "HOST003": ("mpi",), "HOST004": ("jit_module",), "HOST001": ("os_io", "os_wait", "os_other", "off_cpu"),
                   "MEM004": ("uvm_migration",)}


def test_each_category_has_at_most_one_owner() -> None:
    owners = {r.id: r.owns_idle for r in default_registry().idle_claimers() if r.owns_idle}
    assert owners == EXPECTED_OWNERS
    cats = [c for cs in owners.values() for c in cs]
    assert len(cats) == len(set(cats))


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_owners_split_each_devices_idle_exactly(src) -> None:
    path = ingested(src)
    trace = Trace(path, src.name)
    try:
        direct = {(int(p), int(d)): int(ns) for p, d, ns in trace.sql(PER_DEVICE_GAPS_SQL) if p is not None}
        params: dict[str, dict[str, float]] = {}
        for k, v in ALL_GAPS.items():
            rule, name = k.split(".")
            params.setdefault(rule, {})[name] = v
        units = owned(trace, params, default_registry().idle_claimers())
        claimed = claims(trace, default_registry().idle_claimers())
        got: dict[tuple[int | None, int | None], int] = {}
        for u in units:
            if u.unit.pid is None or u.unit.device is None or not len(u.gap_start):
                continue
            key = (int(u.unit.pid), int(u.unit.device))
            kept = u.kept()
            assert (kept >= 0).all(), "a claim never takes more than its gap"
            got[key] = got.get(key, 0) + int(kept.sum())
        for c in claimed.by_rule.values():
            for (pid, dev), ns in c.by_device.items():
                assert pid is not None and dev is not None, "claims are painted on known processes' devices"
                got[(pid, dev)] = got.get((pid, dev), 0) + ns
    finally:
        trace.close()
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in direct.items() if v}


def test_gpu001_default_gap_is_the_claims_long_gap() -> None:
    """GPU001's gaps by default are the claims' long gaps, so its by-category split reuses the one painting."""
    from analysis.diagnosis.rules.nsys.gaps import gap_rule
    from analysis.diagnosis.rules.nsys.idle_claims import LONG_GAP_NS

    long_gap = gap_rule(default_registry().idle_claimers(), "long_gap")
    assert long_gap.id == "GPU001" and long_gap.thresholds["min_gap_us"].default * 1000 == LONG_GAP_NS


CLAIMED = {c for cs in EXPECTED_OWNERS.values() for c in cs} - {"allocation"}  # MEM006 claims only in loops


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_gpu001_says_what_the_host_did_in_the_idle_it_keeps(src) -> None:
    """GPU001's ``by_category`` (the anatomy's categories of the idle it keeps) adds up to its impact exactly and
    holds no category a rule claims everywhere (allocation is MEM006's only inside the loop's phases: a window's
    epilogue or a one-shot program's work keeps it with the gap's owner)."""
    from analysis.api import analyze

    result = analyze([ingested(src)]).to_json()
    for f in result["findings"]:
        if f["rule_id"] != "GPU001":
            continue
        assert sum(f["by_category"].values()) == f["impact_ns"]
        assert not CLAIMED & set(f["by_category"])
