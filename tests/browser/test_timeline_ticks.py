"""Timeline ticks in a real Chromium: counted from the run's start, where the findings' evidence times count
from too; 3 significant digits at coarse zoom and, zoomed deep, as many decimals as the step needs, grouped in
threes ("+1.326 858 2 s"). The page's ``GP.tickLabel`` is checked against this file's port of it."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.browser.test_run_ranks import NCCL_R0, NCCL_R1, TORCHRUN, _open_run
from tests.conftest import corpus_file

pytestmark = pytest.mark.browser

UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1, "ns"))


def tick_label(rel: float, step: float) -> str:
    """The tick label: the unit the larger of the time and the step reads in, 3 significant digits or the
    decimals the step needs (at most 9), decimals grouped in threes."""
    a = abs(rel)
    div, unit = next(((d, u) for d, u in UNITS if max(a, step) >= d * 0.9995), UNITS[-1])
    need = max(0, math.ceil(-math.log10(step / div) - 1e-9))
    v = a / div
    sig3 = 0 if a == 0 or div == 1 else 2 if v < 10 else 1 if v < 100 else 0
    whole, _, frac = f"{v:.{min(9, max(need, sig3))}f}".partition(".")
    digits = "." + " ".join(frac[i:i + 3] for i in range(0, len(frac), 3)) if frac else ""
    return ("+" if rel > 0 else "−" if rel < 0 else "") + whole + digits + " " + unit


# (time from the origin, tick step) in ns, and the label each reads as.
CASES = [
    (1_326_858_200, 100, "+1.326 858 2 s"),
    (1_326_858_240, 20, "+1.326 858 24 s"),
    (1_326_858_000, 1000, "+1.326 858 s"),
    (1_500_000_000, 500_000_000, "+1.50 s"),
    (26_800_000_000, 2_000_000_000, "+26.8 s"),
    (0, 1_000_000_000, "0 s"),
    (250_000, 50_000, "+250 µs"),
    (4_210_000, 1_000_000, "+4.21 ms"),
    (-2_000_000, 1_000_000, "−2.00 ms"),
    (546, 100, "+546 ns"),
    (42, 10, "+42 ns"),
]


def test_the_port_reads_as_specified() -> None:
    assert [tick_label(r, s) for r, s, _ in CASES] == [label for _, _, label in CASES]


def _ticks(tl) -> tuple[list[str], list[float], float]:
    return (json.loads(tl.get_attribute("data-ticks")), json.loads(tl.get_attribute("data-tick-rel")),
            float(tl.get_attribute("data-tick-step")))


def test_deep_zoom_ticks_group_their_digits_and_count_from_the_run_start(signed_in, store) -> None:
    run_id = store([corpus_file(TORCHRUN)], job="ticks")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    _open_run(page, run_id)
    tl = page.locator("#timeline")
    assert page.evaluate("cases => cases.map(([r, s]) => GP.tickLabel(r, s))", [[r, s] for r, s, _ in CASES]) == [
        label for _, _, label in CASES]
    # Coarse: the whole run, 3 significant digits, ticks at whole steps from the run's start (run clock 0).
    labels, rel, step = _ticks(tl)
    assert len(labels) >= 3 and labels == [tick_label(r, step) for r in rel]
    assert all(r == round(r / step) * step for r in rel)
    ext = page.evaluate("() => document.getElementById('timeline').gpTimeline.data.extent")
    # From the run's start, not from its first activity (which comes later).
    assert ext[0] > 10 * step and rel[0] >= ext[0] - step
    # Deep: a 2 µs window in the middle of the run gives steps of a few hundred ns, their decimals grouped in threes.
    t = (ext[0] + ext[1]) // 2 + 7
    loads = int(tl.get_attribute("data-loads"))
    page.evaluate("t => document.getElementById('timeline').gpTimeline.load(t, t + 2000)", t)
    page.wait_for_function("n => Number(document.getElementById('timeline').dataset.loads) > n", arg=loads)
    labels, rel, step = _ticks(tl)
    assert step <= 500 and len(labels) >= 3 and len(set(labels)) == len(labels)
    assert labels == [tick_label(r, step) for r in rel]
    assert all(re.fullmatch(r"\+\d+\.\d{3}( \d{1,3})+ (s|ms)", label) for label in labels), labels
    assert all(t - step <= r <= t + 2000 + step for r in rel)
    # The same by keyboard, as a person zooms: W under the pointer down to the narrowest window (1 µs).
    page.evaluate("() => document.getElementById('timeline').gpTimeline.load(null, null)")
    page.wait_for_function("() => document.getElementById('timeline').gpTimeline.view[1] - "
                           "document.getElementById('timeline').gpTimeline.view[0] > 1e6")
    page.eval_on_selector("#timeline canvas", "c => c.scrollIntoView({block: 'start'})")
    box = page.locator("#timeline canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 40)
    loads = int(tl.get_attribute("data-loads"))
    for _ in range(60):
        page.keyboard.press("w")
    # The window fetched after the last key press: 1 µs (its ends rounded out to whole ns).
    page.wait_for_function("""n => { const t = document.getElementById('timeline'), v = t.gpTimeline.view;
                                     return Number(t.dataset.loads) > n && v[1] - v[0] <= 1001; }""", arg=loads)
    labels, rel, step = _ticks(tl)
    assert step <= 500 and len(labels) >= 2 and labels == [tick_label(r, step) for r in rel]
    assert all(re.fullmatch(r"\+\d+\.\d{3}( \d{1,3})+ (s|ms)", label) for label in labels), labels
    signed_in.shot_of("#timeline", "timeline-deep-zoom")
    assert not signed_in.errors


def test_evidence_times_read_on_the_timelines_clock(signed_in, store) -> None:
    run_id = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="ticks-ranks")
    page = signed_in.page
    _open_run(page, run_id)
    offsets = page.evaluate("() => Object.fromEntries(document.getElementById('timeline').gpTimeline.groups"
                            ".map(g => [String(g.report_id), g.offset_ns || 0]))")
    assert any(offsets.values())      # the ranks' sessions started apart: the run clock shifts one of them
    rows = page.evaluate("""() => Array.from(document.querySelectorAll('details.finding tr.zoomable')).map(tr => ({
        report: tr.closest('details.finding').dataset.reportId, range: JSON.parse(tr.dataset.range),
        at: Number(tr.querySelector('td.evidence-at').dataset.ns)}))""")
    ranked = [r for r in rows if r["report"]]
    assert ranked and {r["report"] for r in ranked} == set(offsets)
    for r in ranked:
        assert r["at"] == r["range"]["start_ns"] + offsets[r["report"]]
