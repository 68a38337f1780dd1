"""SYNC001 counts sync calls, not gaps, in its title: on a real export where 10 sync calls are
followed by 171 idle gaps, the title names the calls that idle followed, computed here from the raw export."""

from __future__ import annotations

import re
import sqlite3

from analysis.api import analyze
from tests.analysis.planting import ingested, raw_api_names, raw_gaps
from tests.conftest import corpus_file

EXPORT = "clue-um-t4.sqlite"
SYNC = re.compile(r"^cu(da)?(Device|Stream|Thread|Event|Ctx)Synchronize(_v\d+)?$")


def test_sync001_title_counts_calls_not_gaps():
    src = corpus_file(EXPORT)
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        gaps = raw_gaps(con)
        calls = [(pid, s, e) for _, s, e, name, pid, _ in raw_api_names(con) if SYNC.match(name)]
    finally:
        con.close()
    # A gap is SYNC001's when a sync call of its process is in progress as the device goes idle.
    followed = {c for pid, _dev, g0, _g1 in gaps for c in calls if c[0] == pid and c[1] <= g0 <= c[2]}
    owned = [g for g in gaps if any(c[0] == g[0] and c[1] <= g[2] <= c[2] for c in calls)]
    assert len(owned) > 10 * len(followed) > 0, "the export shows gaps outnumbering calls"
    (f,) = [f for f in analyze([ingested(src)], rules=["SYNC001"]).to_json()["findings"]]
    assert f["idle_gaps"] == len(owned) and f["sync_calls"] == len(calls)
    assert f["syncs_followed_by_idle"] == len(followed)
    assert f"after {len(followed)} of {len(calls)} sync calls" in f["title"]
    assert f"{len(owned)} idle gap(s) followed {len(followed)} blocking synchronize call(s)" in f["message"]
