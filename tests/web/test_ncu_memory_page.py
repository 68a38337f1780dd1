"""The run page's ncu memory charts and roofline: drawn from the stored numbers, one per kernel, names escaped."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from analysis.api import analyze, fmt
from app.models import Report, RunSummary
from app.services.jobs import pipeline
from tests.analysis.ncu_builders import long_csv, write
from tests.conftest import corpus_file
from tests.web import seed

DROPOUT, COPY = "pytorch-dropout-dram.csv", "numba-copy-blocked-full.csv"


def test_run_page_shows_memory_charts_and_roofline_for_an_ncu_run(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file(DROPOUT), corpus_file(COPY)], job="ncu")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert 'id="ncu-memory"' in html and "ncu_memory.css" in html
    # one chart per kernel configuration: 162 dropout launches of one configuration, one numba copy
    assert html.count("data-kernel-chart") == 2
    stored = {s.report_id: s.data for s in db.scalars(sa.select(RunSummary).where(RunSummary.run_id == run_id))
              if s.report_id is not None}
    copy = next(d for d in stored.values() if d["kernels_total"] == 1)["kernels"][0]["memory"]
    dram = next(lv for lv in copy["levels"] if lv["name"] == "dram")
    assert f"{dram['pct_of_peak']:.1f} % of peak" == "61.8 % of peak" and "61.8 % of peak" in html
    assert re.search(r'<g class="level" data-level="dram"><rect[^>]*fill="#[0-9a-f]{6}"', html)
    # the roofline has a dot per kernel with FLOP counts (dropout only: the numba export has none)
    assert html.count("data-roofline-dot") == 1
    # stored: one story per kernel configuration (the longest launch) with the count and time of all 162
    dropout = next(d for d in stored.values() if d["kernels_total"] == 162)
    assert dropout["kernel_configs_total"] == 1 and dropout["kernels"][0]["launches"] == 162
    analyzed = analyze([pipeline.data_path(settings, r.trace_path) for r in
                        db.scalars(sa.select(Report).where(Report.run_id == run_id, Report.kind == "ncu"))]).to_json()
    launches = next(r["kernels"] for r in analyzed["reports"] if len(r["kernels"]) == 162)
    assert dropout["kernels"][0]["duration_ns"] == max(k["duration_ns"] for k in launches)
    total_ms = sum(k["duration_ns"] for k in launches) / 1e6
    assert dropout["kernels"][0]["profiled_ns"] == pytest.approx(total_ms * 1e6)
    assert f"· {fmt.duration(total_ms * 1e6)}</title>" in html  # dot size and label: the kernel's profiled time
    assert "162 profiled launches" in html


def test_kernel_names_are_escaped_in_the_charts(client, db, settings, ingested, tmp_path) -> None:
    data = long_csv([("GPU Speed Of Light Throughput", "Duration", "usecond", "10"),
                     ("GPU Speed Of Light Throughput", "DRAM Throughput", "%", "20"),
                     ("Command line profiler metrics", "dram__bytes.sum", "byte", "1,000"),
                     ("Command line profiler metrics", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst",
                      "5,000")],
                    kernels=[{"Kernel Name": f"{seed.XSS_SCRIPT}k{seed.XSS_IMG}(int)"}])
    src = write(tmp_path, data, "evil.csv")
    run_id = seed.store_run(db, settings, ingested, [src], job="evil")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert html.count("data-kernel-chart") == 1 and html.count("data-roofline-dot") == 1
    section = html[html.index('id="ncu-memory"'):]
    assert seed.XSS_SCRIPT not in section and seed.XSS_IMG not in section
    assert "&lt;script&gt;alert(1)&lt;/script&gt;k" in section


@pytest.mark.parametrize("pct", [None, 0.0, 50.0, 100.0, 250.0])
def test_share_colour_is_a_hex_fill(pct) -> None:
    from app.services.pages.web_memory import share_color

    assert re.fullmatch(r"#[0-9a-f]{6}", share_color(pct))


def test_nsys_only_run_has_no_memory_section(client, db, settings, ingested) -> None:
    run_id = seed.store_run(db, settings, ingested, [corpus_file("vecadd-2026.sqlite")], job="plain")
    assert 'id="ncu-memory"' not in client.get(f"/runs/{run_id}").get_data(as_text=True)


def test_compare_shows_the_same_kernel_before_and_after(client, db, settings, ingested, tmp_path) -> None:
    base = seed.store_run(db, settings, ingested, [corpus_file(COPY)], job="copy")
    # the same kernel (name, grid, block of the real export's identity cells) after a change: DRAM at 30%
    after = long_csv([("GPU Speed Of Light Throughput", "Duration", "msecond", "10"),
                      ("GPU Speed Of Light Throughput", "DRAM Throughput", "%", "30"),
                      ("Memory Workload Analysis", "Memory Throughput", "Gbyte/second", "95")])
    head = seed.store_run(db, settings, ingested, [write(tmp_path, after, "after.csv")], job="copy")
    html = client.get(f"/compare?a={base}&b={head}").get_data(as_text=True)
    section = html[html.index('id="ncu-memory-compare"'):]
    assert section.count("data-kernel-pair") == 1 and section.count('class="memchart"') == 2
    before_at, after_at = section.index("61.8 % of peak"), section.index("30.0 % of peak")
    assert before_at < after_at  # baseline first
    assert "21.1 ms → 10.0 ms per profiled launch" in section  # three significant digits


def test_each_kernel_lists_what_it_could_save_and_unknown_time_says_so(client, db, settings, ingested) -> None:
    shared_mem = "conv2d-shared-memory.csv"  # neither a duration nor cycles in this export
    run_id = seed.store_run(db, settings, ingested, [corpus_file(COPY), corpus_file(shared_mem)], job="ncu")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    from app.web.filters import fmt_ns

    stored = [s.data for s in db.scalars(sa.select(RunSummary).where(RunSummary.run_id == run_id))
              if s.report_id is not None]
    copy = next(d for d in stored if d["kernels"] and d["kernels"][0]["causes"])["kernels"][0]
    # numba copy: the cause (NCU001) first, its symptoms after, and the kernel's saving is their bounded sum
    assert copy["causes"][0]["rule_id"] == "NCU001" and copy["causes"][0]["role"] == "cause"
    assert copy["estimated_saving_ns"] == sum(c["impact_ns"] for c in copy["causes"]) <= copy["duration_ns"]
    assert f"could save {fmt_ns(copy['estimated_saving_ns'])}" in html and 'class="kernel-causes"' in html
    assert "unknown time profiled" in html and "0 ns profiled" not in html
