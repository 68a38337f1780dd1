"""The run page's storage, network and GPU metrics section: each rank's storage I/O from the OS runtime trace,
as stored in the report's summary, drawn with formatted numbers; absent for exports without such data."""

from __future__ import annotations

import re
from html import unescape

import duckdb
import sqlalchemy as sa

from analysis.system_metrics import STORAGE_KINDS
from app.models import Report
from app.services import pipeline
from tests.conftest import corpus_file
from tests.web import seed


def _rows(html: str) -> list[tuple[str, str, str]]:
    """(kind, calls, time) of each row of the storage table."""
    table = re.search(r'<table class="storage-io">(.*?)</table>', html, re.S).group(1)
    return [(kind, unescape(calls), unescape(total)) for kind, calls, total in re.findall(
        r'<tr data-kind="([a-z]+)"><td class="num">\d+</td><td>[a-z]+</td><td class="num">([^<]+)</td>\s*'
        r'<td class="num">\d+</td><td class="num" data-ns="\d+">([^<]+)</td>', table)]


def test_storage_io_per_rank_equals_the_report(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")], job="io")
    (report,) = db.scalars(sa.select(Report).where(Report.run_id == run_id))
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="system-metrics"' in html
    con = duckdb.connect(str(pipeline.data_path(settings, report.trace_path)), read_only=True)
    try:
        reads = con.execute("""SELECT COUNT(*), SUM(end_ns - start_ns) FROM osrt
                               WHERE list_contains($names, regexp_replace(ltrim(name, '_'), '64$', ''))""",
                            {"names": list(STORAGE_KINDS["read"])}).fetchone()
    finally:
        con.close()
    rows = {kind: (calls, total) for kind, calls, total in _rows(html)}
    assert set(rows) >= {"read", "write", "metadata"}
    from app.web.filters import fmt_ns, fmt_number

    assert rows["read"] == (fmt_number(int(reads[0])), fmt_ns(int(reads[1])))


def test_no_system_section_without_data(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")], job="plain")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="system-metrics"' not in html
