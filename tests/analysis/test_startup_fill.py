"""PHASE001 says what fills start-up from the idle anatomy: its idle is the start-up minus the GPU's busy time
there (checked against the raw rows), its categories add up to it, and the first CUDA call it names as creating the
context is the launching thread's first call (SQL)."""

from __future__ import annotations

import pytest

from analysis.api import analyze
from analysis.diagnosis.idle_classes import WORDS
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.conftest import NSYS_FILES

IDS = [p.name.split("__")[-1] for p in NSYS_FILES]


def _busy(rows: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Union length of the intervals clipped to [lo, hi), by a plain sweep."""
    total, reach = 0, lo
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in rows if s < hi and e > lo):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_startup_anatomy_is_the_startup_idle(src):
    path = ingested(src)
    result = analyze([path], rules=["PHASE001"]).to_json()
    found = [f for f in result["findings"] if f["rule_id"] == "PHASE001"]
    phases = result["reports"][0].get("phases") or []
    status = {r["id"]: r for r in result["rules"]}["PHASE001"]
    if not found:  # no GPU work (the rule cannot run), or no start-up of at least PHASE001's 1 ms
        assert status["status"] != "ok" or not any(
            p["name"] == "startup" and p["end_ns"] - p["start_ns"] >= 1_000_000 for p in phases)
        return
    (f,) = found
    ana = f["idle_anatomy"]
    (ev,) = {(e["start_ns"], e["end_ns"]) for e in f["evidence"]}
    lo, hi = ev
    t = Trace(path, src.name)
    try:
        loop = result["reports"][0]["iterations"]
        units = t.sql("SELECT pid, device, count(*) FROM (SELECT pid, device FROM kernels UNION ALL "
                      "SELECT pid, device FROM memcpy UNION ALL SELECT pid, device FROM memset) GROUP BY ALL")
        assert units
        pid, dev = units[0][0], units[0][1]
        if len(units) > 1:  # the loop's device speaks; checked on the single-device exports
            assert sum(c["ns"] for c in f["idle_anatomy"]["categories"]) == f["idle_anatomy"]["idle_ns"]
            return
        args = {"pid": pid, "dev": dev, "lo": lo, "hi": hi}
        rows = t.sql("""SELECT start_ns, end_ns FROM kernels WHERE pid = $pid AND device = $dev
                        UNION ALL SELECT start_ns, end_ns FROM memcpy WHERE pid = $pid AND device = $dev
                        UNION ALL SELECT start_ns, end_ns FROM memset WHERE pid = $pid AND device = $dev""", args)
        first = t.sql("""SELECT name, end_ns - start_ns FROM cuda_api WHERE pid = $pid AND tid IN
                         (SELECT DISTINCT tid FROM kernels WHERE pid = $pid) AND start_ns >= $lo AND start_ns < $hi
                         ORDER BY start_ns LIMIT 1""", args)
    finally:
        t.close()
    assert loop["count"] > 0 or loop.get("program") is not None or result["reports"][0]["phases"]
    assert ana["idle_ns"] == (hi - lo) - _busy(rows, lo, hi)
    assert sum(c["ns"] for c in ana["categories"]) == ana["idle_ns"]
    if ana["first_call"] is not None:
        assert (ana["first_call"]["name"], ana["first_call"]["ns"]) == first[0] and first[0][1] >= 10_000_000
    else:
        assert not first or first[0][1] < 10_000_000
    top = ana["categories"][0]
    assert f"the host was: {WORDS[top['category']]} " in f["message"] and "imports, model construction" not in f["advice"]
