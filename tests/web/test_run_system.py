"""The run page's storage, network and GPU metrics section: each rank's storage I/O from the OS runtime trace,
as stored in the report's summary, drawn with formatted numbers; absent for exports without such data."""

from __future__ import annotations

import re
from html import unescape

import duckdb
import sqlalchemy as sa

from analysis.diagnosis.system_metrics import STORAGE_KINDS
from app.models import Report
from app.services.jobs import pipeline
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


def test_comm003_groups_table_with_message_sizes(client, db, settings, ingested, tmp_path) -> None:
    """With NCCL message sizes planted in the real two-node export, COMM003's finding on the run page has its
    size-class table: collective, size class, communicator size and bus bandwidth equal to the stored finding."""
    from app.models import Finding
    from app.web.filters import fmt_number
    from tests.analysis.planting import copy_export
    from tests.analysis.rule_cases_system import COMM003_RING, plant_nccl_sizes

    src = copy_export(corpus_file("nccl-ring-2node-r0-ault43.sqlite"), tmp_path / "sized.sqlite")
    plant_nccl_sizes(src, COMM003_RING, nranks=2)
    run_id = seed.store_run(db, settings, ingested, [src], job="sized")
    (stored,) = db.scalars(sa.select(Finding).where(Finding.run_id == run_id, Finding.rule_id == "COMM003"))
    (group,) = stored.extra["groups"]
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    row = re.search(r'<tr class="collective-group">(.*?)</tr>', html, re.S).group(1)
    cells = [unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert cells[:4] == ["AllReduce RING LL", group["size_class"], "2", "1"]
    assert cells[5] == f"{fmt_number(group['bus_gbps'])} GB/s"
    # one report (rank 0 from its captured environment): its rank, GPU and bus bandwidth
    ((entry),) = group["ranks"]
    assert " ".join(cells[7].split()) == (f"rank {entry['rank']} GPU {entry['device']} "
                                          f"{fmt_number(entry['bus_gbps'])} GB/s") and entry["rank"] == 0
