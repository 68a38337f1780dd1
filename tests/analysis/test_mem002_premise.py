"""Issue #39 class 3: MEM002's pinned-memory advice under the premise contract (docs/rules.md).

Pinned host memory fixes a copy that blocks because it moves pageable host memory; it does nothing for a memset
that blocks (on managed or pinned memory a memset is synchronous whatever the call) nor for a copy between pinned
and device memory. Planted on a real host-bound loop (cupy-power-iteration): a 2 s gap opened in the loop with
the launching thread inside one call, and the GPU operation that call issued at its end. MEM002's premise is that
the idle it owns is inside copy calls: a memset on managed memory fails it (the finding says so, gives the memset
advice and never leads the verdict). A copy that holds the host leads as a blocking copy, and its advice follows
the copy's memory kinds: pinned memory for a pageable copy, asynchronous copies or resident data for a pinned one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import analyze
from tests.analysis.planting import clone_row, copy_export, ingest_copy, sqlite_rw
from tests.analysis.rule_cases_idle import plant_api
from tests.conftest import corpus_file

EXPORT = "cupy-power-iteration.sqlite"
GAP = 2_000_000_000
PAGEABLE, PINNED, DEVICE, MANAGED = 0, 1, 2, 4  # ENUM_CUDA_MEM_KIND


def _plant(path: Path, call: str, src_kind: int, dst_kind: int) -> None:
    """The call over the opened gap, and its GPU operation (a 64 KiB copy, or a memset) in its last 100 us."""
    plant_api(path, call, GAP)
    con = sqlite_rw(path)
    start, end, corr = con.execute("""SELECT start, "end", correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME
                                      WHERE correlationId = (SELECT MAX(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME)
                                      """).fetchone()
    template = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_MEMCPY LIMIT 1").fetchone()[0]
    with con:
        if call.startswith("cudaMemset"):
            cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_MEMCPY)")]
            if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMSET'").fetchone():
                con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER, deviceId INTEGER, "
                            "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
                            "value INTEGER, bytes INTEGER, graphNodeId INTEGER, memKind INTEGER)")
            row = dict(zip(cols, con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid = ?",
                                             [template]).fetchone(), strict=True))
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, "
                        "correlationId, globalPid, value, bytes, memKind) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 65536, ?)",
                        [end - 100_000, end - 1000, row["deviceId"], row["contextId"], row["streamId"], corr,
                         row["globalPid"], dst_kind])
        else:
            clone_row(con, "CUPTI_ACTIVITY_KIND_MEMCPY", template, start=end - 100_000, end=end - 1000,
                      correlationId=corr, bytes=65536, copyKind=2, srcKind=src_kind, dstKind=dst_kind)
    con.close()


CASES = [
    # (planted call, source kind, destination kind, premise holds, pinned advice fits, words in the premise)
    ("cudaMemcpy_v3020", DEVICE, PAGEABLE, True, True, "cudaMemcpy 2.00 s of idle, 1 of its 1 copies pageable"),
    ("cudaMemcpy_v3020", DEVICE, PINNED, True, False, "move no pageable host memory"),
    ("cudaMemset_v3020", MANAGED, MANAGED, False, False, "not a pageable copy"),
]


@pytest.mark.parametrize(("call", "src", "dst", "holds", "pinned", "words"), CASES,
                         ids=["pageable-copy", "pinned-copy", "managed-memset"])
def test_pinned_advice_only_for_pageable_copies(tmp_path, call, src, dst, holds, pinned, words) -> None:
    path = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    _plant(path, call, src, dst)
    result = analyze([ingest_copy(path, tmp_path / "a.duckdb")], window="all").to_json()
    (f,) = [x for x in result["findings"] if x["rule_id"] == "MEM002"]
    assert GAP <= f["impact_ns"] < GAP + 50_000_000  # the planted call's idle is MEM002's either way
    assert f["premise_holds"] is holds and f["pinned_advice"] is pinned and words in f["premise"], f["premise"]
    v = result["verdict"]
    said = v["text"] + " " + (v["next_step"] or "")
    if holds:  # a copy holds the host: the verdict is the blocking copy, its advice follows the memory kinds
        assert v["rule_id"] == "MEM002" and v["kind"] == "copies", v
        assert "Premise" in f["message"] and "holds" in f["message"]
        assert ("pinned" in said) is pinned and ("pinning changes nothing" in f["advice"]) is not pinned, said
    else:  # a memset holds it: not a copy, the finding never leads and says what fits instead
        assert v["rule_id"] != "MEM002", v
        assert "does not hold" in f["message"] and words in f["title"]
        assert "pinned memory" not in said and "memset" in f["advice"] and "pinning does not help" in f["advice"]
