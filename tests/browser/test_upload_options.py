"""The upload form's analysis window and threshold overrides in a real Chromium against the real
service and workers: a bad value is a readable error in the page and creates nothing; good ones are recorded
on the run and used by its analysis."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.models import Run
from tests.conftest import corpus_file

pytestmark = pytest.mark.browser

FILE = corpus_file("vecadd-2026.sqlite")


def _run_count(service) -> int:
    engine, db = service.session()
    try:
        return db.scalar(sa.select(sa.func.count()).select_from(Run))
    finally:
        db.close()
        engine.dispose()


def _fill(page, *, window: str, thresholds: str) -> None:
    page.goto("/upload")
    page.set_input_files("#files", str(FILE))
    page.fill("#job", "upload-options")
    page.fill("#window", window)
    page.fill("#thresholds", thresholds)
    page.click("#upload-button")


def test_bad_window_or_threshold_is_shown_and_nothing_is_created(signed_in, service) -> None:
    page = signed_in.page
    before = _run_count(service)
    _fill(page, window="time:9s-1s", thresholds="")
    page.wait_for_selector("#upload-error:not([hidden])")
    text = page.locator("#upload-error").inner_text()
    assert text.startswith("VALIDATION_ERROR: Invalid analysis window.") and "window: " in text, text
    assert page.locator("#upload-phase").inner_text() == "Upload refused; nothing was stored."
    signed_in.shot("upload-bad-window")

    _fill(page, window="", thresholds="GPU001.no_such=3")
    page.wait_for_function("() => document.getElementById('upload-error').textContent.includes('no_such')")
    text = page.locator("#upload-error").inner_text()
    assert "thresholds: rule GPU001 has no threshold 'no_such' (it has: min_gap_us" in text, text
    # A trace-like string comes back as text, never markup.
    _fill(page, window="nvtx:<b>x</b>", thresholds="GPU001.min_gap_us=<img src=x onerror=alert(1)>")
    page.wait_for_function("() => document.getElementById('upload-error').textContent.includes('<img')")
    assert page.locator("#upload-error img, #upload-error b").count() == 0
    assert _run_count(service) == before
    # The only console messages are the three refused requests' 400s (no script error).
    assert all("status of 400" in e for e in signed_in.errors) and len(signed_in.errors) == 3, signed_in.errors
    assert not signed_in.dialogs
    # The catalogue's thresholds are offered with their defaults.
    options = page.locator("#threshold-list option").evaluate_all("os => os.map(o => o.value)")
    assert "GPU001.min_gap_us=50.0" in options or any(o.startswith("GPU001.min_gap_us=") for o in options)


def test_window_and_thresholds_reach_the_analysis(signed_in, service) -> None:
    page = signed_in.page
    _fill(page, window="all", thresholds="GPU001.min_gap_us=1e9 COMM002.min_skew_us=50")
    page.wait_for_selector("#open-run")
    page.wait_for_selector("#upload-status[data-run-status=ready]", timeout=180_000)
    run_id = int(page.locator("#open-run").get_attribute("href").rsplit("/", 1)[1])
    run = page.evaluate("async (id) => (await fetch('/api/v1/runs/' + id)).json()", run_id)
    assert run["analysis_window"] == "all" and run["analysis_status"] == "ready"
    assert run["tags"] == {"goodput.thresholds": "COMM002.min_skew_us=50 GPU001.min_gap_us=1e+09"}
    findings = page.evaluate("async (id) => (await fetch('/api/v1/runs/' + id + '/findings?page_size=200')).json()",
                             run_id)
    assert not [f for f in findings["items"] if f["rule_id"] == "GPU001"]
    phases = {f["extra"]["phase"] for f in findings["items"]}
    assert "all" in phases and "steady" not in phases, phases   # the whole report, not the default window
    page.click("#open-run")
    page.wait_for_selector("#breakdown svg")
    assert "goodput.thresholds" in page.content()
    assert not signed_in.errors and not signed_in.dialogs
