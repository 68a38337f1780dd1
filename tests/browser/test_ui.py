"""The web UI in a real Chromium against the real service: sign in, upload to ready, run page, compare,
job trends, tokens, and trace strings carrying HTML/JS payloads shown as text."""

from __future__ import annotations

import base64
import csv
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from analysis.readers.ncu.names import parse_dims
from tests.conftest import corpus_file
from tests.web import seed

pytestmark = pytest.mark.browser

TWO_GPU = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"
NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"


def canvas_ink(page, selector: str) -> int:
    """Pixels of the canvas that are not the white background."""
    return page.eval_on_selector(selector, """c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) n++;
        return n;
    }""")


def test_sign_in_rejects_a_wrong_password_then_accepts(watched, service) -> None:
    page = watched.page
    page.goto("/")
    assert "/login" in page.url                       # pages need a session
    page.fill("#username", "alice")
    page.fill("#password", "wrong-password")
    page.click("button[type=submit]")
    assert page.locator("#login-error").inner_text() == "Unknown user or wrong password."
    page.fill("#username", "alice")
    page.fill("#password", "browser-test-password")
    page.click("button[type=submit]")
    page.wait_for_url("**/")
    assert page.locator("h1").inner_text() == "Runs"
    cookie = next(c for c in page.context.cookies() if c["name"] == "session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"


def test_upload_through_the_page_reaches_ready(signed_in) -> None:
    page = signed_in.page
    page.goto("/upload")
    # One file dropped (a real drop event with a DataTransfer), one chosen with the file picker.
    dropped = corpus_file("vecadd-2026.sqlite")
    payload = base64.b64encode(dropped.read_bytes()).decode()
    page.evaluate("""([name, b64]) => {
        const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], name));
        document.getElementById('dropzone').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));
    }""", [dropped.name, payload])
    page.set_input_files("#files", str(corpus_file("cupy-a100.sqlite")))
    assert page.locator("#file-list tbody tr").count() == 2
    page.fill("#job", "upload-e2e")
    page.fill("#tags", "branch=main nodes=1")
    page.fill("#git_sha", "abc1234")
    page.click("#upload-button")
    page.wait_for_selector("#open-run")
    assert page.locator("#upload-progress").evaluate("p => p.value") == 100
    page.wait_for_selector("#upload-status[data-run-status=ready]", timeout=180_000)
    statuses = page.locator("#report-status tbody tr").evaluate_all("rs => rs.map(r => r.dataset.status)")
    assert statuses == ["ready", "ready"]
    signed_in.shot("upload")
    page.click("#open-run")
    page.wait_for_selector("#breakdown svg")
    assert page.locator("#reports tbody tr").count() == 2
    assert "upload-e2e" in page.locator("h1").inner_text()
    assert not signed_in.errors and not signed_in.dialogs


def test_upload_error_is_shown_with_its_message(signed_in, tmp_path) -> None:
    page = signed_in.page
    page.goto("/upload")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    page.set_input_files("#files", str(empty))
    page.fill("#job", "upload-e2e")
    page.click("#upload-button")
    error = page.locator("#upload-error")
    error.wait_for(state="visible")
    assert error.inner_text().startswith("EMPTY_FILE:")


def test_ingest_failure_is_shown_with_its_message(signed_in, tmp_path) -> None:
    import sqlite3

    other = tmp_path / "not-a-profile.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    page = signed_in.page
    page.goto("/upload")
    page.set_input_files("#files", str(other))
    page.fill("#job", "upload-e2e")
    page.click("#upload-button")
    page.wait_for_selector("#upload-status[data-run-status=failed]", timeout=120_000)
    row = page.locator("#report-status tbody tr")
    assert row.get_attribute("data-status") == "failed"
    code, _, message = row.locator(".error-message").inner_text().partition(": ")
    assert code and len(message) > 20
    assert not signed_in.dialogs


def test_run_page_findings_breakdown_timeline(signed_in, store) -> None:
    run_id = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="nccl-ring", tags={"nodes": "2"})
    page = signed_in.page
    page.goto(f"/runs/{run_id}")
    # findings are grouped by rule, the rules ranked by their largest per-rank impact
    impacts = page.locator("#findings > .rule-row").evaluate_all("ds => ds.map(d => Number(d.dataset.impactNs))")
    assert impacts and impacts == sorted(impacts, reverse=True)
    # the breakdown chart has one bar per GPU, with segments of non-zero width
    rows = page.locator("#breakdown svg text.label").count()
    widths = page.locator("#breakdown svg rect.seg").evaluate_all("rs => rs.map(r => r.getBBox().width)")
    assert rows >= 2 * 2 and widths and all(w > 0 for w in widths)  # label + total per row, 2 ranks
    # the timeline drew boxes
    tl = page.locator("#timeline")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")
    assert int(tl.get_attribute("data-lanes")) >= 1
    assert canvas_ink(page, "#timeline canvas") > 500
    # expanding the top finding shows its evidence table and advice, and highlights its ranges
    page.evaluate("() => document.querySelectorAll('details.rule-group').forEach(d => d.open = true)")
    first = page.locator("details.finding").first
    first.locator(":scope > summary").click()
    assert first.locator("table.evidence tbody tr").count() >= 1
    assert first.locator(".advice").inner_text().strip()
    if first.get_attribute("data-ranges") not in (None, "[]"):
        page.wait_for_function("() => Number(document.getElementById('timeline').dataset.highlighted) > 0")
    # kernel table from the report's trace, sortable
    page.wait_for_selector("#kernel-table[data-loaded='1']")
    assert page.locator("#kernel-table tbody tr").count() >= 1
    # the NVTX table sorts by a column and filters by text
    counts = "() => Array.from(document.querySelectorAll('#nvtx-table tbody tr')).map(r => Number(r.cells[2].dataset.sort))"
    page.click("#nvtx-table th:has-text('count')")
    assert page.evaluate(counts) == sorted(page.evaluate(counts))
    page.click("#nvtx-table th:has-text('count')")
    assert page.evaluate(counts) == sorted(page.evaluate(counts), reverse=True)
    page.fill("input[data-filter-table=nvtx-table]", "ncclCommInitRank")
    visible = page.locator("#nvtx-table tbody tr:visible")
    assert visible.count() >= 1 and all("ncclCommInitRank" in t for t in visible.all_inner_texts())
    signed_in.shot("run")
    signed_in.shot_of("#timeline", "run-timeline")
    # zooming in fetches a narrower window
    before = page.locator("#timeline .tl-status").inner_text()
    page.click("#timeline .tl-in")
    page.wait_for_function("b => document.querySelector('#timeline .tl-status').textContent !== b", arg=before)
    assert not signed_in.errors and not signed_in.dialogs


def test_run_page_follows_the_analysis(signed_in, store) -> None:
    run_id = store([corpus_file("cupy-a100.sqlite")], job="live", analyze_run=False)
    page = signed_in.page
    page.goto(f"/runs/{run_id}")
    assert page.locator("#run-status").inner_text() == "processing"
    assert page.locator("details.finding").count() == 0
    store.finish_analysis(run_id)
    page.wait_for_selector("#run-status[data-status=ready]", timeout=15_000)  # reloaded by the page itself
    page.wait_for_selector("#breakdown svg")
    assert not signed_in.errors


def test_ncu_finding_links_to_the_kernels_nsys_time(signed_in, store, tmp_path) -> None:
    ncu = corpus_file("numba-copy-blocked-full.csv")
    with ncu.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    kernel = row["Kernel Name"]
    nsys = seed.kernel_renamed_export(corpus_file("cupy-a100.sqlite"), tmp_path / "paired.sqlite", kernel,
                                      parse_dims(row["Grid Size"]), parse_dims(row["Block Size"]))
    run_id = store([nsys, ncu], job="paired")
    page = signed_in.page
    page.goto(f"/runs/{run_id}")
    finding = page.locator("details.finding[data-ncu-kernel]").first
    assert finding.get_attribute("data-ncu-kernel") == kernel
    finding.locator(":scope > summary").click()
    finding.locator(".show-kernel").click()
    where = finding.locator(".kernel-where")
    where.wait_for(state="visible")
    page.wait_for_function("() => /launches/.test(document.querySelector('details[open] .kernel-where').textContent)")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.highlighted) > 0")
    assert not signed_in.errors


def test_compare_two_runs(signed_in, store) -> None:
    a = store([corpus_file(TWO_GPU)], job="torchrun")
    b = store([corpus_file("cupy-power-iteration.sqlite")], job="torchrun")
    page = signed_in.page
    page.goto("/?job=torchrun")
    page.check(f"#runs-table input[name=a][value='{a}']")
    page.check(f"#runs-table input[name=b][value='{b}']")
    page.click("#compare-selected")
    page.wait_for_load_state()
    url = urlsplit(page.url)
    assert url.path == "/compare" and parse_qs(url.query) == {"a": [str(a)], "b": [str(b)]}
    assert page.locator(".compare-side svg.breakdown").count() == 2
    rows = page.locator("#kernel-diff tbody tr").count()
    assert rows >= 1 and "No kernel changed" not in page.locator("#kernel-diff").inner_text()
    signed_in.shot("compare")
    assert not signed_in.errors


def test_job_trends_mark_a_regression(signed_in, store) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    sources = [NCCL_R0] * 4 + [TWO_GPU]
    for i, src in enumerate(sources):
        store([corpus_file(src)], job="trend-job", created_at=start + timedelta(days=i), git_sha=f"sha{i}")
    page = signed_in.page
    page.goto("/jobs/trend-job")
    for chart in ("#trend-goodput", "#trend-gpu-time", "#trend-comm"):
        assert page.locator(f"{chart} svg circle").count() == len(sources)
        assert page.locator(f"{chart} svg path.line").get_attribute("d").count("L") == len(sources) - 1
    assert page.locator("#top-rules tbody tr").count() >= 1
    # the last run doubles the exposed communication of the four identical runs before it
    assert page.locator("#trend-comm svg circle.regressed").count() == 1
    assert page.locator("#job-runs tr.regressed").count() == 1
    signed_in.shot("job")


def test_tokens_create_and_revoke(signed_in) -> None:
    page = signed_in.page
    signed_in.accept_dialogs = True   # the revoke confirmation
    page.goto("/tokens")
    page.fill("input[name=name]", "ci-uploader")
    page.select_option("select[name=scope]", "write")
    page.click("text=Create token")
    token = page.locator("#new-token-value").inner_text()
    assert re.fullmatch(r"gp_[A-Za-z0-9_-]{20,}", token)
    row = page.locator("#tokens tbody tr", has_text="ci-uploader")
    row.locator("button", has_text="Revoke").click()
    page.wait_for_selector("#tokens .badge.failed")
    assert "revoked" in page.locator("#tokens tbody tr", has_text="ci-uploader").inner_text()
    assert len(signed_in.dialogs) == 1 and "Revoke" in signed_in.dialogs[0]
    signed_in.shot("tokens")


def test_trace_strings_with_payloads_are_text(signed_in, store, tmp_path) -> None:
    evil = seed.xss_export(corpus_file("cupy-power-iteration.sqlite"), tmp_path / "evil.sqlite")
    run_id = store([evil], job=f"job{seed.XSS_IMG}", tags={"note": seed.XSS_SCRIPT})
    page = signed_in.page
    page.goto(f"/runs/{run_id}")
    page.wait_for_selector("#kernel-table[data-loaded='1']")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")
    # names are shortened in the cell (templates folded); the full name is the cell's title
    kernel_names = page.locator("#kernel-table td.name").evaluate_all("tds => tds.map(td => td.title)")
    assert any(n.startswith(seed.XSS_SCRIPT) for n in kernel_names)
    assert any(n.startswith(seed.XSS_IMG) for n in kernel_names)
    nvtx = page.locator("#nvtx-table td.name").all_inner_texts()
    assert any(seed.XSS_SCRIPT in n or seed.XSS_IMG in n for n in nvtx)
    assert seed.XSS_SCRIPT in page.locator("h1 + p").inner_text()     # the tag
    assert seed.XSS_IMG in page.locator("h1").inner_text()             # the job name
    # hovering the timeline's boxes shows their names in the tooltip, as text
    page.eval_on_selector("#timeline canvas", "c => c.scrollIntoView({block: 'start'})")
    box = page.locator("#timeline canvas").bounding_box()
    seen = set()
    for x in range(260, int(box["width"]) - 20, 40):
        for y in range(26, min(int(box["height"]), 200), 8):
            page.mouse.move(box["x"] + x, box["y"] + y)
            if page.locator(".tl-tip").is_visible():
                seen.add(page.locator(".tl-tip").text_content())
        if any(seed.XSS_SCRIPT in t or seed.XSS_IMG in t for t in seen):
            break
    assert any(seed.XSS_SCRIPT in t or seed.XSS_IMG in t for t in seen), seen
    assert page.locator(".tl-tip *").count() == 0
    signed_in.shot("xss-run")
    signed_in.shot_of("#timeline", "xss-timeline")
    for path in ("/", f"/runs/{run_id}", f"/jobs/job{seed.XSS_IMG}"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.locator("img").count() == 0
        assert page.evaluate("() => Array.from(document.scripts).every(s => s.src.includes('/assets/js/'))")
    assert signed_in.dialogs == []
    assert signed_in.errors == []
