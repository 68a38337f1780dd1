"""The first hour in the browser, checked on real corpus runs in Chromium: no page scrolls sideways at 390 px
or 1280 px, axe-core (vendored for the tests in tests/browser/assets) finds no serious or critical violation,
and no rendered number has a forced unit, a long run of zeros or more than three significant digits."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import SHOTS
from tests.conftest import corpus_dir, corpus_file

pytestmark = pytest.mark.browser

AXE = Path(__file__).parent / "assets" / "axe.min.js"
NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"
NCU = "numba-copy-blocked-full.csv"
NSYS = "saxpy-mpi-rank0-perlmutter.sqlite"
NCCL_LOG = "ZhiyiHu1999__DistributedSysLab_FS24__ault-2x2-shm-socket-tree-simple-2.17.log"
WIDTHS = (390, 1280)
# The innermost elements that end right of the window (what to fix when a page scrolls sideways).
WIDEST = """() => {
    const W = document.documentElement.clientWidth;
    const clipped = e => { for (let p = e.parentElement; p; p = p.parentElement) {
        if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return true; } return false; };
    const out = el => el.getBoundingClientRect().right > W + 1 && !clipped(el);
    return Array.from(document.querySelectorAll('main *')).filter(e => out(e) && !Array.from(e.children).some(out))
        .slice(0, 8).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' +
                         Math.round(e.getBoundingClientRect().right) + ' in ' + e.parentElement.tagName + '.' +
                         e.parentElement.className + ': ' + (e.textContent || '').slice(0, 40));
}"""

_UNIT = r"(?:s|ms|µs|ns|B|kB|MB|GB|TB|MiB|GiB|B/s|kB/s|MB/s|GB/s|TB/s|%|[kMGTP]?FLOP/s|[kMGTP]?FLOP|[kMG]?Hz)"
_NUMBER_WITH_UNIT = re.compile(r"(?<![\w.,:#/-])([+-−]?\d[\d,]*(?:\.\d+)?)\s?(" + _UNIT + r")(?![\w/])")
_LONG_ZEROS = re.compile(r"(?<![\w.])\d*\.000\d*")


def number_problems(text: str, precise: bool = False) -> list[str]:
    """What the formatting module never writes: "0.0115 ms" (a unit forced on a small value), "0.000",
    "18.149 ms" or "3,303.2 MB" (more than three significant digits, unless ``precise``: times read on the
    timeline's clock), "1230 copies" (no separator)."""
    out = [] if precise else [m.group(0) for m in _LONG_ZEROS.finditer(text)]   # "+1.000 5 s" is a tick
    for m in _NUMBER_WITH_UNIT.finditer(text):
        number, unit = m.group(1).lstrip("+-−"), m.group(2)
        whole, _, frac = number.partition(".")
        digits = (whole.replace(",", "") + frac).lstrip("0")
        if unit != "%" and unit != "ns" and whole == "0" and frac:
            out.append(m.group(0))                      # "0.0115 ms": the next unit down reads better
        elif frac and len(digits) > 3 and not precise and not (unit == "%" and len(frac) == 1 and len(whole) <= 3):
            out.append(m.group(0))                      # "18.149 ms", "3,303.2 MB"; "12.3 %" is fine
        elif not frac and "," not in whole and len(whole) > 4:
            out.append(m.group(0))                      # "12288 B": thousands unseparated
    for m in re.finditer(r"(?<![\w.,#/:-])(\d{4,})\s(?:[a-z]+\s){0,2}(copies|calls?|launch(?:es)?|kernels?|gaps?|ranges?|events?|"
                         r"iterations?|instances?|samples?|collectives?|ranks?|hosts?|nodes?|pairs?|participants|"
                         r"reports?|steps?|rules?|findings?|threads?|blocks?|SMs|migrations?|processes|channels?|"
                         r"logs?|launch shapes?|in all|shown|more|found)(?:\((?:s|es)\))?(?!\w)", text):
        out.append(m.group(0))                          # "1230 copies", "1867 idle gap(s)", "(5865 in all)"
    for m in re.finditer(r"(?<![\w.,#/:-])(\d{4,}) of (\d[\d,]*)(?![\w.,])|(?<![\w.,#/:-])(\d[\d,]*) of (\d{4,})(?![\w.,])", text):
        out.append(m.group(0))                          # "1230 of 4096", "12 of 4096"
    for m in re.finditer(r"(?<=[\s(])x\d{4,}\b", text):
        out.append(m.group(0))                          # "cuStreamSynchronize x1933"
    return out


def test_the_number_scanner_catches_what_the_issue_lists() -> None:
    bad = ("0.000000546 s", "0.000393 s", "0.000811 ms", "0.0115 ms", "0.0269 s", "30.387 ms", "+18.149 ms",
           "3,303.2 MB", "3,303.2 MiB", "1,147.2 MB/s", "1230 copies", "0.000", "1,234.5 GFLOP/s", "0.0195 TFLOP/s",
           "+10972.1 %", "12288 B", "1867 idle gap(s)", "5497 sync calls", "cuStreamSynchronize x1933",
           "4095 iteration(s)", "5464 blocking synchronize call(s)", "21302 migrations", "(5865 in all)",
           "the 1024 ranks of host a", "1230 of 4,096 iterations", "12 of 4096 collectives", "Blocks of 1024 threads")
    for text in bad:
        assert number_problems(f"took {text} here"), text
    good = ("26.8 s, 4.21 ms, 546 ns, 12.3 %, 100.0 %, 1,230 copies, 12,288 kernels, 1.23 GB, +18.1 ms, 2026-12-06 03:14, "
            "290 GFLOP/s, 1.41 GHz, 1,867 idle gap(s), cuStreamSynchronize x1,933, sgemm_128x1024, +10,972 %, 45 %, 0.52 %, 0.039 %, < 0.01 %, +1.3 points, "
            "1,230 of 4,096 iterations, 21,302 migrations, (5,865 in all), run 1024 of job 7, rank 1024")
    assert number_problems(good) == []


def _run_ids(store, folder: Path) -> dict[str, int]:
    from tests.analysis.test_compare_per_step import BASE, _later

    first = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="first-hour", git_sha="aaaa111")
    second = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="first-hour", git_sha="bbbb222")
    ncu = store([corpus_file(NCU)], job="first-hour-ncu")
    nsys = store([corpus_file(NSYS)], job="first-hour-nsys")
    log = store([corpus_dir() / "nccl" / NCCL_LOG, corpus_file(NCCL_R0)], job="first-hour-nccl-log")
    # A before/after pair with communication kernels split into waiting and transfer: the corpus torchrun pair
    # and its planted variant whose SendRecv peers arrive later (tests.analysis.test_compare_per_step).
    before = store([BASE], job="first-hour-comm", git_sha="cccc333")
    after = store([_later(folder / "torchrun-later.sqlite")], job="first-hour-comm", git_sha="dddd444")
    return {"nccl": second, "first": first, "ncu": ncu, "nsys": nsys, "nccl_log": log, "comm_before": before,
            "comm_after": after}


def _pages(ids: dict[str, int]) -> dict[str, str]:
    # run: two ranks of one NCCL job (multi-rank); nsys: one export; ncu: one Nsight Compute CSV; nccl_log: an
    # NCCL debug log with an export of its job (the network path).
    return {"runs": "/", "run": f"/runs/{ids['nccl']}", "ncu": f"/runs/{ids['ncu']}", "nsys": f"/runs/{ids['nsys']}",
            "nccl_log": f"/runs/{ids['nccl_log']}",
            "compare": f"/compare?a={ids['first']}&b={ids['nccl']}", "job": "/jobs/first-hour",
            "compare-comm": f"/compare?a={ids['comm_before']}&b={ids['comm_after']}",
            "rules": "/rules", "upload": "/upload", "tokens": "/tokens", "api": "/api/docs"}


def _settle(page, name: str) -> None:
    if name in ("run", "ncu", "nsys", "nccl_log"):
        page.wait_for_selector("#kernel-table[data-loaded='1']", state="attached")
    if name in ("run", "nsys", "nccl_log"):
        page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")
    if name == "nccl_log":
        page.wait_for_selector("#nccl-path")
    if name == "api":
        page.wait_for_selector("#api-reference .opblock", state="attached")


@pytest.fixture(scope="module")
def runs(store, tmp_path_factory) -> dict[str, int]:
    return _run_ids(store, tmp_path_factory.mktemp("first-hour"))


def test_no_page_scrolls_sideways_and_numbers_read_well(signed_in, runs) -> None:
    page = signed_in.page
    problems: dict[str, list[str]] = {}
    wide: dict[tuple[str, int], int] = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in _pages(runs).items():
            page.goto(path)
            _settle(page, name)
            scroll, client = page.evaluate(
                "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            if scroll > client:
                wide[(name, width)] = [scroll, page.evaluate(WIDEST)]
            signed_in.shot(f"first-hour-{name}-{width}")
            if width == WIDTHS[-1] and name != "api":
                # every finding, rule group and evidence table opened: their numbers count too
                page.evaluate("() => document.querySelectorAll('main details').forEach(d => { d.open = true; })")
                # Evidence start times carry the decimals their zoom needs ("1.217 s"): read apart, checked for
                # forced units and zeros only.
                precise = page.evaluate("""() => Array.from(document.querySelectorAll('td.evidence-at')).map(td => {
                    const text = td.textContent; td.textContent = ''; return text; })""")
                found = number_problems(page.locator("main").inner_text())
                found += number_problems(" · ".join(precise), precise=True)
                if found:
                    problems[name] = sorted(set(found))[:12]
    _report("numbers-and-widths", {"wide": {f"{n}@{w}": v for (n, w), v in wide.items()}, "numbers": problems})
    assert not wide, wide
    assert not problems, problems
    assert not signed_in.errors and not signed_in.dialogs


def test_the_before_after_pair_shows_communication_waiting_apart_from_transfer(signed_in, runs) -> None:
    """The compare page of a pair with communication kernels: their waiting and transfer, each with its
    medians, estimate and p; the planted change (the peers arrive later) reads as waiting grown, transfer the
    same."""
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(_pages(runs)["compare-comm"])
    table = page.locator("#collectives-diff")
    table.wait_for(state="visible")
    rows = table.locator("tbody tr")
    assert rows.count() == 2
    assert [rows.nth(i).locator("td").first.inner_text().strip() for i in range(2)] == ["waiting", "transfer"]
    assert [rows.nth(i).get_attribute("data-changed") for i in range(2)] == ["yes", "no"]
    said = page.locator("#collectives-said").inner_text()
    assert said.startswith("waiting grew, transfer unchanged.")
    assert number_problems(table.inner_text()) == []
    assert not signed_in.errors and not signed_in.dialogs


def test_axe_finds_nothing_serious_on_the_main_pages(browser, service, runs) -> None:
    from tests.browser.conftest import PASSWORD, USER

    # axe is injected as an inline script, which the site's CSP forbids: this context bypasses it.
    context = browser.new_context(base_url=service.url, viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/login")
        _axe(page, "login")
        page.fill("#username", USER)
        page.fill("#password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/")
        bad = {}
        for name, path in _pages(runs).items():
            page.goto(path)
            _settle(page, name)
            found = _axe(page, name)
            if found:
                bad[name] = found
        _report("axe", bad)
        assert not bad, bad
    finally:
        context.close()


def _report(name: str, found: dict) -> None:
    # The whole list, where pytest's assertion message would cut it.
    SHOTS.parent.mkdir(parents=True, exist_ok=True)
    (SHOTS.parent / f"first-hour-{name}.json").write_text(json.dumps(found, indent=1, ensure_ascii=False))


def _axe(page, name: str) -> list:
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    result = page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ['violations']});
        return r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
            .map(v => [v.id, v.impact, v.nodes.slice(0, 3).map(n => n.target.join(' ') + ' :: ' +
                                                                 (n.failureSummary || '').slice(0, 160))]);
    }""")
    return result


def test_upload_says_what_happens_until_the_run_is_ready(signed_in, tmp_path) -> None:
    page = signed_in.page
    page.goto("/upload")
    page.fill("#job", "first-hour-upload")
    page.click("#upload-button")                            # no file: a visible message, nothing sent
    error = page.locator("#upload-error")
    assert error.is_visible() and "Choose or drop at least one export file" in error.inner_text()
    empty, notes = tmp_path / "empty.sqlite", tmp_path / "notes.docx"  # .txt is an NCCL log
    empty.write_bytes(b"")
    notes.write_text("not an export")
    page.set_input_files("#files", [str(empty), str(notes), str(corpus_file("pytorch-sgemm-small.csv"))])
    page.click("#upload-button")                            # every refused file named, not only the first
    text = error.inner_text()
    assert "empty.sqlite" in text and "notes.docx" in text and "Nothing was sent" in text, text
    assert page.locator("#upload-status").is_hidden()
    for name in ("empty.sqlite", "notes.docx"):
        page.locator("#file-list tbody tr", has_text=name).locator("button.remove-file").click()
    page.click("#upload-button")
    page.wait_for_selector("#upload-status[data-run-status=ready]", timeout=180_000)
    assert error.is_hidden()
    phase = page.locator("#upload-phase").inner_text()
    assert re.fullmatch(r"Run #\d+: ready after \d+ s", phase), phase        # elapsed time, no stale analysis
    assert "waiting for the server" not in page.locator("#upload-rate").inner_text()
    assert page.locator("#report-status tbody tr td:nth-child(4)").all_inner_texts() == ["done"]
    assert not signed_in.errors and not signed_in.dialogs


def test_bars_trends_and_filters_read_as_they_should(signed_in, runs) -> None:
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/runs/{runs['nccl']}")
    # breakdown: each rank's bar as long as its time against the longest rank's
    bars = page.evaluate("""() => Array.from(document.querySelectorAll('#breakdown svg')).flatMap(svg => {
        const rows = new Map();
        svg.querySelectorAll('rect.seg').forEach(r => { const y = r.getAttribute('y');
            rows.set(y, (rows.get(y) || 0) + r.getBBox().width); });
        return Array.from(rows.values()); })""")
    totals = [json.loads(x) for x in [page.locator("#breakdown").get_attribute("data-breakdown")]][0]
    keys = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
    spans = [sum(max(0, (r.get("segments") or {}).get(k) or 0) for k in keys) for r in totals]
    assert len(bars) == len(spans) >= 2 and max(spans) > 0
    for w, span in zip(bars, spans, strict=True):
        assert w == pytest.approx(620 * span / max(spans), rel=0.01), (bars, spans)
    impacts = page.locator("details.finding > summary .impact").all_inner_texts()
    assert impacts and not [t for t in impacts if re.search(r"\((\d{4,}|[2-9]\d\d|1\d\d)(\.\d)? %\)", t)
                            and not re.search(r"\(100\.0 %\)", t)], impacts   # no share above 100 %
    # the runs of one day: the trend axis tells them apart by time of day
    page.goto("/jobs/first-hour")
    labels = page.locator("#trend-goodput svg text.xdate").all_text_contents()
    assert labels and all(re.fullmatch(r"\d\d:\d\d", t) for t in labels), labels
    # each chart spans its card (no half-empty card)
    fill = page.evaluate("""() => ['trend-goodput', 'trend-gpu-time', 'trend-comm'].map(id => {
        const card = document.getElementById(id), svg = card.querySelector('svg');
        const inner = card.clientWidth - parseFloat(getComputedStyle(card).paddingLeft) - parseFloat(getComputedStyle(card).paddingRight);
        return svg ? svg.getBoundingClientRect().width / inner : 0; })""")
    assert all(f > 0.9 for f in fill), fill
    # the job filter finds a part of the name, whatever its case
    page.goto("/?job=FIRST-HOUR")
    jobs = page.locator("tbody tr[data-run-id] td:nth-child(2) a").all_inner_texts()
    assert len(jobs) >= 3 and all("first-hour" in j for j in jobs), jobs
    assert "deleted" not in page.locator("select[name=status]").inner_text()


def test_loops_are_marked_on_the_timeline(signed_in, store) -> None:
    run_id = store([corpus_file("cupy-power-iteration.sqlite")], job="first-hour-loops")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/runs/{run_id}")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")
    page.wait_for_function("() => JSON.parse(document.getElementById('timeline').dataset.loops || '[]').length > 0")
    (loop,) = json.loads(page.locator("#timeline").get_attribute("data-loops"))
    assert loop["index"] == 0 and loop["x1"] - loop["x0"] > 100       # most of the 1.8 s report is the loop
    assert page.locator(".tl-key[data-phase=loop]").count() == 1
    assert not signed_in.errors


def test_the_run_page_says_what_is_happening_until_ready(signed_in, store) -> None:
    run_id = store([corpus_file("vecadd-2026.sqlite")], job="first-hour-live", analyze_run=False)
    page = signed_in.page
    page.goto(f"/runs/{run_id}")
    line = page.locator("#run-progress")
    page.wait_for_function("() => document.getElementById('run-progress').textContent.includes('since the upload')")
    assert re.match(r"processing: 1 of 1 report ready, analysis \w+ · [\d.,]+ (s|ms) since the upload",
                    line.inner_text()), line.inner_text()
    store.finish_analysis(run_id)
    page.wait_for_selector("#run-status[data-status=ready]", timeout=15_000)
    assert page.locator("#run-progress").count() == 0
    assert not signed_in.errors


def test_findings_of_call_totals_go_to_the_timeline_and_loop_windows_keep_their_steps(signed_in, store) -> None:
    # saxpy-mpi: MEM006 and HOST003 give totals per call name; their button highlights the calls that held the GPU idle.
    run_id = store([corpus_file("saxpy-mpi-rank0-perlmutter.sqlite")], job="first-hour-calls")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/runs/{run_id}")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")
    page.evaluate("() => document.querySelectorAll('#minor-findings, details.rule-group').forEach(d => { d.open = true; })")
    for rule in ("MEM006", "HOST003"):
        finding = page.locator(f"details.finding[data-rule={rule}]")
        finding.locator("> summary").click()
        button = finding.locator("button.show-on-timeline")
        assert button.is_visible()
        before = page.evaluate("() => Number(document.getElementById('timeline').dataset.loads || 0)")
        button.click()
        page.wait_for_function("(n) => Number(document.getElementById('timeline').dataset.loads || 0) > n", arg=before)
        page.wait_for_function("() => Number(document.getElementById('timeline').dataset.highlighted) > 0")
        note = finding.locator(".timeline-note").inner_text()
        assert re.fullmatch(r"[\d,]+ calls? held the GPU idle(; the [\d,]+ with the most idle inside are highlighted)?",
                            note), note
    assert page.locator("p.no-timeline").count() == 0
    # clue-um-t4 under loop:0 (not its main loop): the Iterations section and the per-step figures stay.
    run_id = store([corpus_file("clue-um-t4.sqlite")], job="first-hour-loop-window")
    page.goto(f"/runs/{run_id}")
    page.fill("#window-form input[name=window]", "loop:0")
    page.locator("#window-form button[type=submit]").click()
    deadline = time.monotonic() + 120                 # the service's worker analyses the run again

    def iterations_text() -> str:
        try:
            return (page.locator("#iterations").all_inner_texts() or [""])[0]
        except PlaywrightError:  # the page reloaded itself as the run's status changed (run.js watchStatus)
            return ""

    while "Loop 0 of 2 (the analysis window)" not in iterations_text():
        assert time.monotonic() < deadline, page.locator("main").inner_text()[:2000]
        time.sleep(2)
        try:
            page.goto(f"/runs/{run_id}")
        except PlaywrightError as exc:  # the same: its own reload interrupted ours, and the page is loading
            if "interrupted by another navigation" not in str(exc):
                raise
            page.wait_for_load_state()
    assert page.locator("#iterations tr.window-loop[data-loop='0']").count() == 1
    assert page.locator("details.finding .per-step").count() > 0
    assert not signed_in.errors and not signed_in.dialogs


def test_the_api_reference_is_linked_and_renders_offline(signed_in, service) -> None:
    """Point 4: "API reference" in the navigation; Swagger UI renders the OpenAPI document from the service alone
    (every request the page makes goes to the service: it works on a cluster without internet), with the worked
    examples for upload, wait and compare."""
    page = signed_in.page
    page.goto("/")
    link = page.locator("nav[aria-label=Main] a", has_text="API reference")
    assert link.get_attribute("href") == "/api/docs"
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    link.click()
    page.wait_for_selector("#api-reference .opblock", state="attached")
    assert page.locator("#api-reference .opblock").count() >= 10
    foreign = [u for u in requests if not u.startswith(service.url) and not u.startswith(("data:", "blob:"))]
    assert requests and not foreign, foreign
    headings = page.locator("main h3").all_inner_texts()
    assert {"Upload a run", "Wait for the analysis", "Compare two runs"} <= set(headings), headings
    assert not signed_in.errors


def test_the_ncu_page_fills_its_kernel_table_and_draws_labelled_roofs(signed_in, runs, store) -> None:
    """Point 5: no dash in the kernel table's times; the roofline has roofs with labels; no nsys-only section."""
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/runs/{runs['ncu']}")
    page.wait_for_selector("#kernel-table[data-loaded='1']", state="attached")
    heads = page.locator("#kernel-table thead th").all_inner_texts()
    rows = page.locator("#kernel-table tbody tr")
    assert rows.count() >= 1
    for i in range(rows.count()):
        cells = dict(zip(heads, rows.nth(i).locator("td").all_inner_texts(), strict=False))
        for col in ("total", "mean", "min", "max"):
            assert re.fullmatch(r"[\d.,]+ (s|ms|µs|ns)", cells[col]), (col, cells)
        pct = next(v for k, v in cells.items() if k.startswith("%"))
        assert re.fullmatch(r"[\d.,]+ %", pct), cells
    main = page.locator("main").inner_text()
    assert page.locator("#window-form").count() == 0 and "No GPU activity" not in main
    # numba's copy does no arithmetic (no roofline); conv2d's kernels are each drawn against their roof, labelled
    page.goto(f"/runs/{store([corpus_file('conv2d-result-rules.csv')], job='first-hour-roofs')}")
    roofs = page.locator("#roofline line.roof")
    labels = [t for t in page.locator("#roofline text.roof-label").all_text_contents() if t.strip()]
    assert roofs.count() >= 1 and labels, labels
    assert any(re.fullmatch(r"(DRAM|L2|L1|COMPUTE|compute) roof [\d.,]+ [kMGTP]?FLOP/s", t) for t in labels), labels
    assert page.locator("#roofline circle[data-roofline-dot]").count() >= 1
    assert not signed_in.errors


def _timeline_label_column(page) -> tuple[int, int]:
    """The timeline's label column and its canvas, in CSS px, once it has drawn; every phase band and loop it drew
    starts right of the column (the plot is what is left)."""
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.labelWidth) > 0")
    label, width, right = page.evaluate("""() => { const c = document.querySelector('#timeline canvas');
        return [Number(document.getElementById('timeline').dataset.labelWidth), c.clientWidth,
                c.getBoundingClientRect().right]; }""")
    drawn = [json.loads(page.locator("#timeline").get_attribute(a) or "[]") for a in ("data-phases", "data-loops")]
    assert all(b["x0"] >= label for bands in drawn for b in bands), (label, drawn)
    assert right <= page.viewport_size["width"], (right, page.viewport_size)
    return label, width


def test_the_run_page_labels_ranks_keeps_a_refused_window_and_fits_a_phone(signed_in, runs, store) -> None:
    """Points 2 and 7: the idle-anatomy rows say rank and host, not a long file name; no finding leaves a dangling
    "rank 1 ·"; a refused window stays in the field with the reason; the header wraps so Sign out stays on screen;
    the timeline's label column takes at most 30 % of its width at 1280 px and at 390 px (it took 60 % on a phone)."""
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    # two exports as ranks 0 and 1, both with idle the host explains (the NCCL pair has none)
    ranked = store([corpus_file(NSYS), corpus_file("cupy-power-iteration.sqlite")], job="first-hour-ranks")
    page.goto(f"/runs/{ranked}")
    heads = [t.split(":")[0] for t in page.locator("#idle-anatomy .idle-row > div.muted:not(.idle-legend)").all_inner_texts()]
    assert {h.split(" · ")[0] for h in heads} == {"rank 0", "rank 1"}, heads
    assert all(re.fullmatch(r"rank \d+( · [\w.-]+)? · device \d+ · \w+", h) for h in heads), heads
    # point 3: what axe does not ask for: the bars and the timeline canvas are named images, a skip link leads to main
    assert page.locator("#idle-anatomy svg.idle-bar:not([role=img]), #idle-anatomy svg.idle-bar:not([aria-label])").count() == 0
    assert page.locator("#timeline canvas[role=img][aria-label]").count() == 1
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent.trim()") == "Skip to content"
    page.evaluate("() => document.querySelectorAll('main details').forEach(d => { d.open = true; })")
    dangling = re.findall(r"rank \d+ ·\s*(?:\n|$)", page.locator("main").inner_text())
    assert not dangling, dangling
    page.goto(f"/runs/{runs['nccl']}")
    label, width = _timeline_label_column(page)
    assert label <= 0.3 * width + 1, (label, width)
    page.evaluate("() => document.querySelectorAll('main details').forEach(d => { d.open = true; })")
    dangling = re.findall(r"rank \d+ ·\s*(?:\n|$)", page.locator("main").inner_text())
    assert not dangling, dangling
    page.fill("#window-form input[name=window]", "iterations:0-999999")
    page.locator("#window-form button[type=submit]").click()
    page.wait_for_load_state()
    field = page.locator("#window-form input[name=window]")
    assert field.input_value() == "iterations:0-999999" and field.get_attribute("aria-invalid") == "true"
    assert "iterations:0-999999 asks for iterations" in page.locator("main").inner_text()   # the reason, shown
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/runs/{runs['nccl']}")
    box = page.locator("header button", has_text="Sign out").bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    label, width = _timeline_label_column(page)
    assert label <= 0.3 * width + 1, (label, width)
    assert not signed_in.dialogs


def test_upload_help_names_every_input_and_a_failed_window_says_so(signed_in) -> None:
    """Point 6: the help names .nsys-rep and loop:N; a run whose analysis fails on a window that does not fit says
    that (bad_window and the valid range), with the elapsed time, not "no report could be ingested"."""
    page = signed_in.page
    page.goto("/upload")
    help_text = page.locator("main").inner_text()
    assert ".nsys-rep" in help_text and "loop:N" in help_text
    page.fill("#job", "first-hour-bad-window")
    page.fill("#window", "loop:7")
    page.set_input_files("#files", [str(corpus_file("vecadd-2026.sqlite"))])
    page.click("#upload-button")
    page.wait_for_selector("#upload-status[data-run-status=failed]", timeout=180_000)
    phase = page.locator("#upload-phase").inner_text()
    assert re.fullmatch(r"Run #\d+: failed after \d+ s", phase), phase
    error = page.locator("#upload-error").inner_text()
    assert "bad_window" in error and "no report could be ingested" not in error, error
    run_id = re.search(r"#(\d+)", phase).group(1)
    page.goto(f"/runs/{run_id}")
    main = page.locator("main").inner_text()
    assert "bad_window" in main and "no report could be ingested" not in main
    assert not signed_in.dialogs


def test_a_token_upload_names_the_token(signed_in, service) -> None:
    """Point 8: a run uploaded with an API token says which token, not "admin (created by goodput serve)"."""
    import requests as http

    page = signed_in.page
    page.goto("/tokens")
    page.fill("input[name=name]", "first-hour-ci")
    page.select_option("select[name=scope]", "write")
    page.click("text=Create token")
    token = page.locator("#new-token-value").inner_text()
    src = corpus_file("vecadd-2026.sqlite")
    with src.open("rb") as fh:
        resp = http.post(f"{service.url}/api/v1/runs", headers={"Authorization": f"Bearer {token}"},
                         data={"job": "first-hour-token"}, files={"files": (src.name, fh)}, timeout=60)
    assert resp.status_code == 202, resp.text
    page.goto(f"/runs/{resp.json()['id']}")
    header = page.locator("main").inner_text()
    # a person's token: the person (a service token's upload names the token: tests/web/test_first_hour_pages.py)
    assert "submitted by alice via api" in header and "created by goodput serve" not in header, header[:300]
    page.goto("/?job=first-hour-token")
    assert page.locator("tbody tr[data-run-id] td:nth-child(4)").all_inner_texts() == ["alice"]
