"""The compare page shows the communication kernels' comparison that ``goodput diff`` and the API carry:
waiting and transfer of the collectives and send/receive pairs, each mean per instance and rank, the tested
sample's medians, the estimate and the p-value, written by the shared number formatter (and read well by
the browser test's number scan). The head is the
planted variant of the corpus torchrun pair in which every SendRecv instance's last rank arrives later: its
waiting grows, its transfer stays."""

from __future__ import annotations

import html as html_lib
import re
from datetime import UTC, datetime, timedelta

from analysis.api import fmt
from app.services.pages.compare import compare_runs
from tests.analysis.test_compare_per_step import BASE, _later
from tests.browser.test_first_hour import number_problems
from tests.web import seed


def test_the_compare_page_shows_waiting_and_transfer(client, db, settings, ingested, tmp_path) -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    head_export = _later(tmp_path / "later.sqlite")
    base = seed.store_run(db, settings, ingested, [BASE], job="coll", created_at=t0)
    head = seed.store_run(db, settings, ingested, [head_export], job="coll", created_at=t0 + timedelta(days=1))
    coll = compare_runs(db, settings, base, head).to_api()["collectives"]
    assert coll and coll["tested"] is True
    text = client.get(f"/compare?a={base}&b={head}").get_data(as_text=True)
    assert 'id="collectives-diff"' in text
    found = re.search(r'id="collectives-said">(.*?)</p>', text, re.S)
    assert found is not None
    said = html_lib.unescape(found.group(1))
    assert said.startswith(coll["said"] + ".") and coll["basis"] in said
    table = text.split('id="collectives-diff"')[1].split("</table>")[0]
    rows = dict(re.findall(r'<tr data-key="(\w+)" data-changed="\w+">(.*?)</tr>', table, re.S))
    assert set(rows) == {"wait", "transfer"}
    for key in ("wait", "transfer"):
        d, st = coll[f"{key}_per_instance_ns"], coll[f"{key}_per_step_ns"]
        cells = [html_lib.unescape(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[key], re.S)]
        assert cells == [
            "waiting" if key == "wait" else "transfer",
            fmt.duration(d["base"]), fmt.duration(d["head"]), fmt.signed(fmt.duration(d["delta"]), d["delta"]),
            fmt.signed(fmt.pct(d["delta_pct"]), d["delta_pct"]),
            f"{fmt.duration(st['base']['median'])} → {fmt.duration(st['head']['median'])}",
            fmt.signed(fmt.pct(st["delta_pct"]), st["delta_pct"]), fmt.p_value(st["p_value"]),
            "changed" if d["changed"] else "unchanged"]
    # What the browser's number scan reads there: no forced unit, no long zeros, three significant digits.
    section = text.split("<h2>Communication kernels")[1].split("</table>")[0]
    assert number_problems(html_lib.unescape(re.sub(r"<[^>]+>", " ", section))) == []
    # The planted change: the waiting grew, the transfers are the same.
    assert 'data-key="wait" data-changed="yes"' in table and 'data-key="transfer" data-changed="no"' in table


def test_the_section_is_absent_without_a_split(client, db, settings, ingested) -> None:
    """A run with no communication kernels has no split: the page says nothing about them."""
    from tests.conftest import corpus_file

    cupy = corpus_file("cupy-power-iteration.sqlite")
    base = seed.store_run(db, settings, ingested, [cupy], job="nocoll")
    head = seed.store_run(db, settings, ingested, [cupy], job="nocoll")
    assert compare_runs(db, settings, base, head).to_api()["collectives"] is None
    assert 'id="collectives-diff"' not in client.get(f"/compare?a={base}&b={head}").get_data(as_text=True)
