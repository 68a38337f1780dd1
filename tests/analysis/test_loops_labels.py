"""Loops and phases of every corpus export against the independent labels (``corpus/labels/labels.json``).

The labels list each loop the expert saw, sometimes the same loop measured several ways (per device and
per process, or an outer and an inner marker): those entries overlap in time, so a group of
overlapping entries is one loop. For each group, one of Goodput's loops must agree with one of its
entries: count within 1, median iteration time within 3 %, first start and last end within one
iteration. Exports the labels call loop-free must have no loop, and their work phase (one-shot) must
match the labels' steady window. Where Goodput disagrees with a label, ``DISAGREE`` says why, and the
test checks the evidence with SQL on the export.
"""

from __future__ import annotations

import json

import pytest

from analysis.loops.loop_report import loop_list
from analysis.loops.phases import phase_info, phase_of
from analysis.model.trace import Trace
from tests.analysis.planting import ingested
from tests.conftest import corpus_dir, corpus_file

LABELS = corpus_dir() / "labels" / "labels.json"
MS = 1_000_000


def _labels() -> dict:
    return json.loads(LABELS.read_text())["nsys"] if LABELS.exists() else {}


def _groups(entries: list[dict]) -> list[list[dict]]:
    """Label entries grouped by overlapping windows (one loop seen several ways)."""
    groups: list[list[dict]] = []
    for e in sorted(entries, key=lambda e: e["window_ns"][0]):
        if groups and e["window_ns"][0] < max(x["window_ns"][1] for x in groups[-1]):
            groups[-1].append(e)
        else:
            groups.append([e])
    return groups


def _agrees(ours: dict, label: dict, offset: int) -> bool:
    period = label["median_period_ms"] * MS
    lo, hi = (int(v) - offset for v in label["window_ns"])
    d_start, d_end = abs(ours["start_ns"] - lo), abs(ours["end_ns"] - hi)
    # Within one iteration: a boundary off by at most one median period, or, when one side counts one
    # iteration more, off by that one iteration (however long) while the other boundary agrees.
    bounds = (d_start <= period and d_end <= period) or (
        abs(ours["count"] - label["count"]) == 1 and min(d_start, d_end) <= period)
    return (abs(ours["count"] - label["count"]) <= 1 and abs(ours["median_ns"] - period) <= 0.03 * period
            and bounds)


def _offset(trace: Trace, value: float) -> int:
    """Labels give some times since the Unix epoch: those are shifted onto the report's session time."""
    return int(trace.session_start_utc_ns or 0) if value > 1e15 else 0


# Exports where Goodput and the labels disagree, and why (each checked below with SQL on the export).
DISAGREE = {
    # The export has no kernel, copy or memset rows (runtime API calls only): there is no GPU work to find
    # a loop in; the labels' six loops are cadences of API markers.
    "ZhangXin8069__qcu__runtime-only-no-kernel-table.sqlite": "no GPU rows",
    # The kernel sequence repeats every two hydro timesteps, not every one: the advection sweeps alternate
    # their direction (x then y, then y then x), so one timestep's kernel order never comes back after one
    # calc_dt but always after two; Goodput's loop is the two-step period (half the labels' count, twice
    # their period).
    "hpcgroup__pipit__cloverleaf-devsync.sqlite": "two-step period",
}


@pytest.mark.parametrize("name", sorted(_labels()))
def test_loops_agree_with_the_labels(name):
    label = _labels()[name]
    trace = Trace(ingested(corpus_file(name)), name)
    try:
        info = phase_info(trace)
        ours = [lp.to_json() for lp in loop_list(info.loop)]
        entries = label.get("loops")
        if name in DISAGREE:
            _check_disagreement(name, trace, info, label)
            return
        if entries in (None, "none", []):
            assert ours == [], f"{name}: the labels see no loop ({label.get('loops_note')})"
            if label.get("steady") and label["steady"].get("kind") == "work":
                work = phase_of(info.phases, "work")
                (lo, hi), = label["steady"]["windows_ns"]
                off = _offset(trace, lo)
                assert work is not None
                # One-shot: the work phase is the labels' steady window (to the microsecond here: both
                # are the first and last GPU operation after set-up).
                assert abs(work.start_ns - (lo - off)) <= 0.01 * MS and abs(work.end_ns - (hi - off)) <= 0.01 * MS
            return
        groups = _groups(entries)
        assert abs(len(ours) - len(groups)) <= 1
        for g in groups:
            off = _offset(trace, g[0]["window_ns"][0])
            assert any(_agrees(o, e, off) for o in ours for e in g), (name, ours, g)
    finally:
        trace.close()


def _check_disagreement(name: str, trace: Trace, info, label: dict) -> None:
    why = DISAGREE[name]
    if why == "no GPU rows":
        assert trace.scalar("SELECT (SELECT COUNT(*) FROM kernels) + (SELECT COUNT(*) FROM memcpy) "
                            "+ (SELECT COUNT(*) FROM memset)") == 0
        assert len(info.loop) == 0
    elif why == "two-step period":
        # calc_dt runs once per timestep; the kernel names between two consecutive calc_dt differ from
        # one timestep to the next and are equal two timesteps apart.
        rows = trace.sql("""
            WITH k AS (SELECT start_ns, COALESCE(name, short_name) AS n FROM kernels),
                 d AS (SELECT start_ns, ROW_NUMBER() OVER (ORDER BY start_ns) AS step FROM k WHERE n LIKE '%calc_dt%'),
                 s AS (SELECT (SELECT MAX(step) FROM d WHERE d.start_ns <= k.start_ns) AS step, n, k.start_ns FROM k)
            SELECT step, string_agg(n, '|' ORDER BY start_ns) FROM s WHERE step IS NOT NULL GROUP BY step ORDER BY step""")
        seqs = [r[1] for r in rows][1:-1]   # whole timesteps only
        assert len(seqs) >= 4
        assert all(seqs[i] != seqs[i + 1] for i in range(len(seqs) - 1))
        assert all(seqs[i] == seqs[i + 2] for i in range(len(seqs) - 2))
        (entry,) = label["loops"]
        assert info.loop.detail["period_ops"] > 0
        ours = loop_list(info.loop)[0].to_json()
        assert abs(ours["median_ns"] - 2 * entry["median_period_ms"] * MS) <= 0.03 * 2 * entry["median_period_ms"] * MS
