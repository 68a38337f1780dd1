"""SYNC001 counts sync calls, not gaps, in its title: on a real export where 10 sync calls are
followed by 171 idle gaps, the title names the calls that idle followed, computed here from the raw export."""

from __future__ import annotations

import re
import sqlite3

from analysis.api import analyze, fmt
from tests.analysis.planting import ingested, raw_api_names, raw_gaps
from tests.conftest import corpus_file

EXPORT = "clue-um-t4.sqlite"
SYNC = re.compile(r"^cu(da)?(Device|Stream|Thread|Event|Ctx)Synchronize(_v\d+)?$")


def _gaps_and_syncs(src) -> tuple[list, list]:
    """The raw export's idle gaps (pid, device, start, end) and sync calls (pid, start, end)."""
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        return raw_gaps(con), [(pid, s, e) for _, s, e, name, pid, _ in raw_api_names(con) if SYNC.match(name)]
    finally:
        con.close()


def _opened_in_sync(gaps: list, calls: list) -> list:
    """The gaps that opened while a sync call of their process was in progress."""
    return [g for g in gaps if any(c[0] == g[0] and c[1] <= g[2] <= c[2] for c in calls)]


def test_sync001_title_counts_calls_not_gaps():
    src = corpus_file(EXPORT)
    gaps, calls = _gaps_and_syncs(src)
    # A gap is SYNC001's when a sync call of its process is in progress as the device goes idle.
    followed = {c for pid, _dev, g0, _g1 in gaps for c in calls if c[0] == pid and c[1] <= g0 <= c[2]}
    owned = _opened_in_sync(gaps, calls)
    assert len(owned) > 10 * len(followed) > 0, "the export shows gaps outnumbering calls"
    # The whole report: the raw counts above cover every gap and call, the steady window starts at the first
    # iteration (its first sync call is set-up's).
    (f,) = [f for f in analyze([ingested(src)], rules=["SYNC001"], window="all").to_json()["findings"]]
    assert f["idle_gaps"] == len(owned) and f["sync_calls"] == len(calls)
    assert f["syncs_followed_by_idle"] == len(followed)
    assert f"after {fmt.count(len(followed))} of {fmt.count(len(calls))} sync calls" in f["title"]
    assert f"{fmt.count(len(owned))} idle gap(s) followed {fmt.count(len(followed))} blocking synchronize call(s)" in f["message"]


def test_sync001_without_a_gap_opening_in_a_sync_says_so():
    """cupy-power-iteration calls cudaStreamSynchronize 89 times, each with the GPU already idle (no gap opens
    while one is in progress, checked on the raw export): SYNC001 owns the idle inside those calls and says that,
    not "after 0 of 89 sync calls" nor "0 idle gap(s) followed 0 ..." (the whole report: all its calls)."""
    src = corpus_file("cupy-power-iteration.sqlite")
    gaps, calls = _gaps_and_syncs(src)
    assert calls and not _opened_in_sync(gaps, calls)
    (f,) = [f for f in analyze([ingested(src)], rules=["SYNC001"], window="all").to_json()["findings"]]
    assert f["syncs_followed_by_idle"] == 0 and f["idle_gaps"] == 0 and f["sync_calls"] == len(calls)
    assert re.fullmatch(r"GPU idle \S+ \S+ inside sync calls \(cudaStreamSynchronize\)", f["title"])
    assert "no idle gap opened while one was in progress" in f["message"] and "0 idle gap(s)" not in f["message"]
