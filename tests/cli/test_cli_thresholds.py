"""`--threshold` on the command line: every value out of the threshold's declared type and range is one line
on stderr and exit status 2 before any ingest (no traceback), and the help lists every threshold's range."""

from __future__ import annotations

import pytest

from analysis.diagnosis.rules.registry import default_registry
from tests.cli.test_cli_ingest_analyze import goodput
from tests.conftest import corpus_file

BAD = {
    "GPU001.min_gap_us=1e308": "GPU001.min_gap_us must be a number from 0 to 100,000,000,000 us",
    "GPU002.window_min_us=-1e308": "GPU002.window_min_us must be a number from 1 to 100,000,000,000 us",
    "KRN001.short_kernel_us=inf": "KRN001.short_kernel_us must be a number from 0 to 100,000,000,000 us",
    "KRN003.min_instances=1e308": "KRN003.min_instances must be a whole number from 1 to 1,000,000,000",
    "COMM002.min_skew_us=nan": "COMM002.min_skew_us must be a number from 0 to 100,000,000,000 us",
    "MEM005.min_share_pct=-5e-324": "MEM005.min_share_pct must be a number from 0 to 100 %",
    "MEM005.host_link_gbps=5e-324": "MEM005.host_link_gbps must be a number from 0.001 to 100,000 GB/s (or 0)",
    "GPU001.min_gap_us=" + "9" * 10_000: "GPU001.min_gap_us must be a number from 0 to 100,000,000,000 us",
    "GPU001.min_gap_us=\udcff": "GPU001.min_gap_us must be a number",
}


@pytest.mark.parametrize("item", list(BAD), ids=[k[:40] for k in BAD])
def test_out_of_range_thresholds_exit_2_with_one_line(item):
    proc = goodput("analyze", "--threshold", item, "--quiet", str(corpus_file("vecadd-2026.sqlite")))
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "bad_option: " + BAD[item] in proc.stderr


def test_the_help_lists_every_threshold_with_its_range():
    text = goodput("analyze", "--help").stdout
    for rule in default_registry():
        for name, t in rule.thresholds.items():
            assert f"{rule.id}.{name}" in text and t.range_text() in text
