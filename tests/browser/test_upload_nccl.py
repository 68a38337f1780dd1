"""An NCCL debug log chosen in the upload page with the run's nsys export, in a real Chromium against the real
service and workers: the file list names the log, the run becomes ready, and its page draws the network path."""

from __future__ import annotations

import pytest

from tests.conftest import corpus_dir, corpus_file

pytestmark = pytest.mark.browser

LOG = corpus_dir() / "nccl" / "ZhiyiHu1999__DistributedSysLab_FS24__ault-2x2-shm-socket-tree-simple-2.17.log"
EXPORT = corpus_file("nccl-ring-2node-r0-ault43.sqlite")


def test_a_log_uploaded_with_its_export_shows_the_network_path(signed_in, tmp_path) -> None:
    from tests.nccl_planted import ault_log_of_ring_rank0

    log = tmp_path / LOG.name  # the ault log with its rank 0 the export's process (planted)
    log.write_text(ault_log_of_ring_rank0())
    page = signed_in.page
    page.goto("/upload")
    page.set_input_files("#files", [str(log), str(EXPORT)])
    rows = page.locator("#file-list tbody tr")
    types = {rows.nth(i).locator("td").nth(0).inner_text(): rows.nth(i).locator("td").nth(1).inner_text()
             for i in range(rows.count())}
    assert types[LOG.name] == "NCCL log (checked on upload)" and types[EXPORT.name] == "Nsight Systems export"
    page.fill("#job", "nccl-browser")
    page.click("#upload-button")
    page.wait_for_selector("#open-run")
    page.wait_for_selector("#upload-status[data-run-status=ready]", timeout=180_000)
    page.click("#open-run")
    page.wait_for_selector("#nccl-path")
    assert page.locator("#nccl-inter").inner_text() == "NET/Socket"
    assert page.locator("#nccl-ranks tbody tr").count() == 4
    assert EXPORT.name in page.locator("#nccl-joined").inner_text()
    signed_in.shot_of("#nccl-path", "nccl-path")
    assert not signed_in.errors and not signed_in.dialogs
