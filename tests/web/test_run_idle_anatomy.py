"""The run page's idle anatomy: one stacked bar per device and phase whose segments are the stored categories,
adding up to the device's idle, with the top names on hover, escaped."""

from __future__ import annotations

import re
from html import unescape

import sqlalchemy as sa

from analysis.api import analyze
from app.models import Report
from tests.analysis import planting
from tests.conftest import corpus_file
from tests.web import seed


def test_bars_add_up_to_the_stored_idle(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")], job="idle")
    (report,) = db.scalars(sa.select(Report).where(Report.run_id == run_id))
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="idle-anatomy"' in html
    rows = re.findall(r'<div class="idle-row" data-report-id="(\d+)" data-device="(\d+)" data-phase="(\w+)" '
                      r'data-idle-ns="(\d+)">(.*?)<div class="idle-legend', html, re.S)
    assert rows
    result = analyze([planting.ingested(corpus_file("saxpy-mpi-rank0-perlmutter.sqlite"))]).to_json()
    (bd_dev,) = result["reports"][0]["breakdown"]["devices"]
    assert sum(int(idle) for *_, idle, _ in rows) == bd_dev["idle_ns"]
    for rid, _dev, _phase, idle, body in rows:
        assert int(rid) == report.id
        segs = re.findall(r'data-category="([a-z_]+)" data-ns="(\d+)"', body)
        assert sum(int(ns) for _, ns in segs) == int(idle)
        cats = [c for c, _ in segs]
        assert len(cats) == len(set(cats))
    # The thread off CPU (its scheduler's events) is a segment like any other, named on hover.
    off = sum(int(ns) for *_, body in rows for c, ns in re.findall(r'data-category="([a-z_]+)" data-ns="(\d+)"', body)
              if c == "off_cpu")
    assert off == sum(c["ns"] for e in result["reports"][0]["idle_anatomy"] for c in e["categories"]
                      if c["category"] == "off_cpu") > 0
    assert any("off CPU" in unescape(t) for t in re.findall(r'<title>(off_cpu: [^<]*)</title>', html))
    # The MPI calls behind the steady idle are named on hover (escaped attribute text).
    titles = [unescape(t) for t in re.findall(r'<title>(mpi: [^<]*)</title>', html)]
    assert any("MPI_Send" in t and "MPI_Recv" in t for t in titles)


def test_trace_strings_are_escaped(client, db, settings, ingested, monkeypatch) -> None:
    """A name with markup from the trace shows as text."""
    from analysis.diagnosis import idle_anatomy as ia

    real = ia.resolve_names

    def evil(trace, hashes):
        return {h: "<script>x</script>&" + n for h, n in real(trace, hashes).items()}

    monkeypatch.setattr(ia, "resolve_names", evil)
    run_id = seed.store_run(db, settings, ingested, [corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")], job="evil")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;&amp;" in html
