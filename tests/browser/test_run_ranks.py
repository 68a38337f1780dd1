"""The run page of multi-rank runs in a real Chromium: every rank drawn on one axis, a collective
highlighted on every rank, the rank x rule matrix equal to the findings JSON, keyboard zoom, the merged
Chrome trace, and no horizontal scrolling at 1280 px. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import json

import pytest

from analysis import fmt
from tests.conftest import corpus_file

pytestmark = pytest.mark.browser

NCCL_R0, NCCL_R1 = "nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite"
TORCHRUN = "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"

# Non-white pixels of the timeline canvas inside each rank group's rows, right of the label column.
INK_PER_GROUP = """root => {
    const c = root.querySelector('canvas'), dpr = window.devicePixelRatio || 1;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    return JSON.parse(root.dataset.layout).map(g => {
        let n = 0;
        for (let y = Math.round((g.y0 + 21) * dpr); y < Math.round(g.y1 * dpr); y++)
            for (let x = Math.round(232 * dpr); x < c.width; x++) {
                const i = 4 * (y * c.width + x);
                if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) n++;
            }
        return n;
    });
}"""

# Page coordinates of the middle of the first NCCL box drawn (from the timeline's own layout).
NCCL_BOX = """root => {
    const tl = root.gpTimeline, r = root.querySelector('canvas').getBoundingClientRect();
    for (const row of tl.lay.rows) {
        if (!row.lane || row.lane.kind !== 'gpu') continue;
        const boxes = tl.boxes.get(row.lane.id), at = boxes ? boxes.at : {};
        const b = boxes && boxes.rows.find(b => b[at.category] === 'nccl');
        if (b) return {x: r.left + (tl.x(b[at.start_ns]) + tl.x(b[at.end_ns])) / 2, y: r.top + row.y + row.h / 2};
    }
    return null;
}"""


def _open_run(page, run_id: int) -> None:
    page.goto(f"/runs/{run_id}")
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.boxes) > 0")


def test_all_ranks_on_one_axis_and_a_collective_on_every_rank(signed_in, store) -> None:
    run_id = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="ranks", tags={"nodes": "2"})
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    _open_run(page, run_id)
    tl = page.locator("#timeline")
    assert tl.get_attribute("data-groups") == "2"
    layout = json.loads(tl.get_attribute("data-layout"))
    assert [g["label"] for g in layout] == ["rank 0 · ault43 · GPU 0", "rank 1 · ault44 · GPU 0"]
    ink = tl.evaluate(INK_PER_GROUP)
    assert len(ink) == 2 and all(n > 200 for n in ink), ink
    ticks = json.loads(tl.get_attribute("data-ticks"))
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks)
    # click the NCCL kernel: its launch and the same collective on both ranks, with the arrival skew
    page.eval_on_selector("#timeline canvas", "c => c.scrollIntoView({block: 'start'})")
    box = tl.evaluate(NCCL_BOX)
    assert box is not None
    page.mouse.click(box["x"], box["y"])
    page.wait_for_function("() => document.getElementById('timeline').dataset.selectedInstances === '2'")
    info = page.locator("#timeline .tl-info")
    assert "arrival skew" in info.inner_text()
    assert info.locator("tbody tr").count() == 2
    assert tl.get_attribute("data-flow") == "1"
    signed_in.shot_of("#timeline", "ranks-timeline-collective")
    # W zooms in around the pointer: a narrower window is fetched, lanes and their heights unchanged
    height = page.eval_on_selector("#timeline canvas", "c => c.clientHeight")
    loads = int(tl.get_attribute("data-loads"))
    page.keyboard.press("w")
    page.wait_for_function("n => Number(document.getElementById('timeline').dataset.loads) > n", arg=loads)
    assert page.eval_on_selector("#timeline canvas", "c => c.clientHeight") == height
    assert json.loads(tl.get_attribute("data-layout")) == layout
    # folding a rank keeps its GPU activity on its header row
    page.eval_on_selector("#timeline canvas", "c => c.scrollIntoView({block: 'start'})")
    canvas = page.locator("#timeline canvas").bounding_box()
    page.mouse.click(canvas["x"] + 20, canvas["y"] + layout[1]["y0"] + 10)
    page.wait_for_function("() => JSON.parse(document.getElementById('timeline').dataset.layout)[1].y1 - "
                           "JSON.parse(document.getElementById('timeline').dataset.layout)[1].y0 < 30")
    # no horizontal scrolling at 1280 px
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    signed_in.shot("ranks-run")
    assert not signed_in.errors and not signed_in.dialogs


def test_rank_matrix_equals_the_findings_json(signed_in, store) -> None:
    run_id = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="ranks")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    _open_run(page, run_id)
    findings = page.request.get(f"/runs/{run_id}/findings.json").json()["findings"]
    expected: dict[tuple[int, str], int] = {}
    # one finding per rule across the ranks (each rank's part in per_rank), run-level ones on their rank
    for f in findings:
        parts = f["per_rank"] if "ranks_with_finding" in f else [{"rank": f["rank"], "impact_ns": f["impact_ns"]}]
        for p in parts:
            expected[(p["rank"], f["rule_id"])] = expected.get((p["rank"], f["rule_id"]), 0) + p["impact_ns"]
    assert any("ranks_with_finding" in f for f in findings)
    cells = page.eval_on_selector_all("#impact-matrix tbody td[data-ns]:not([data-ns=''])", """tds => tds.map(td => [
        Number(td.closest('tr').dataset.rank.match(/^rank (\\d+)/)[1]), td.dataset.rule, Number(td.dataset.ns)])""")
    assert {(r, rule): ns for r, rule, ns in cells} == expected
    # shaded by impact (through the CSSOM: the CSP forbids inline styles)
    top = max(expected.values())
    shade = page.eval_on_selector(f"#impact-matrix td[data-ns='{top}']", "td => getComputedStyle(td).backgroundColor")
    assert shade.startswith("rgba(197, 48, 48")
    # filtering by rank hides the findings of the other rank
    page.select_option("#finding-filters select[name=rank]", "rank 1 · ault44 · GPU 0")
    visible = page.eval_on_selector_all("#findings details.finding", "ds => ds.filter(d => !d.hidden).map(d => d.dataset.rank)")
    assert visible and set(visible) == {"rank 1 · ault44 · GPU 0"}
    signed_in.shot_of("#impact-matrix", "ranks-matrix")
    page.select_option("#finding-filters select[name=rank]", "")
    group = page.locator("details.rule-group").first
    group.locator(":scope > summary").click()
    per_rank = group.locator("table.per-rank td[data-ns]").evaluate_all("tds => tds.map(td => Number(td.dataset.ns))")
    rule = group.get_attribute("data-rule")
    assert sorted(per_rank) == sorted(v for (_r, rid), v in expected.items() if rid == rule)
    signed_in.shot_of("#findings", "ranks-findings")
    # the kernel x rank matrix: one column per rank, the cells the kernel table's totals of each rank
    page.wait_for_selector("#kernel-rank-matrix[data-loaded='1']")
    assert page.locator("#kernel-rank-matrix thead th").count() == 3
    page.wait_for_selector("#kernel-table[data-loaded='1']")
    total = page.eval_on_selector("#kernel-table tbody tr td:nth-child(4)", "td => Number(td.dataset.sort)")
    assert page.eval_on_selector("#kernel-rank-matrix tbody tr td:nth-child(2)", "td => Number(td.dataset.ns)") == total
    # the merged Chrome trace: valid JSON, one process per rank
    doc = page.request.get(f"/runs/{run_id}/trace.json").json()
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name")
    assert names == ["rank 0 (ault43)", "rank 1 (ault44)"]
    assert not signed_in.errors


def test_torchrun_processes_share_one_axis_and_evidence_rows_zoom(signed_in, store) -> None:
    run_id = store([corpus_file(TORCHRUN)], job="torchrun-ranks")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    _open_run(page, run_id)
    tl = page.locator("#timeline")
    assert tl.get_attribute("data-groups") == "2"
    ink = tl.evaluate(INK_PER_GROUP)
    assert all(n > 500 for n in ink), ink
    # clicking an evidence row zooms the timeline to that range and outlines it
    page.evaluate("() => document.querySelectorAll('details.rule-group, #minor-findings').forEach(d => d.open = true)")
    row = page.locator("details.finding tr.zoomable").first
    row.locator("xpath=ancestor::details[contains(@class,'finding')][1]").evaluate("d => d.open = true")
    # opening the finding highlights all its evidence (a toggle event, dispatched later): let that settle first
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.highlighted) > 0")
    page.wait_for_load_state("networkidle")
    rng = json.loads(row.get_attribute("data-range"))
    loads = int(tl.get_attribute("data-loads"))
    row.click()
    page.wait_for_function("n => Number(document.getElementById('timeline').dataset.loads) > n", arg=loads)
    page.wait_for_function("() => Number(document.getElementById('timeline').dataset.highlighted) > 0")
    view = page.evaluate("() => document.getElementById('timeline').gpTimeline.view")
    assert view[0] <= rng["start_ns"] and rng["end_ns"] <= view[1]
    assert view[1] - view[0] < 3 * max(1000, rng["end_ns"] - rng["start_ns"]) + 2000
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    signed_in.shot("torchrun-run")
    signed_in.shot_of("#timeline", "torchrun-timeline")
    assert not signed_in.errors


def test_compare_trends_rules_read_well(signed_in, store) -> None:
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 10, 1, tzinfo=UTC)
    base = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="readable", git_sha="1111111aaaa",
                 created_at=t0, tags={"branch": "main"})
    head = store([corpus_file(NCCL_R0), corpus_file(NCCL_R1)], job="readable", git_sha="2222222bbbb",
                 created_at=t0 + timedelta(days=1), tags={"branch": "main"})
    store([corpus_file(TORCHRUN)], job="readable", git_sha="3333333cccc", created_at=t0 + timedelta(days=2),
          tags={"branch": "dev"})
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/runs/{head}")
    page.click("#compare-link")
    page.wait_for_selector("#kpi-deltas")
    assert page.eval_on_selector("#baseline-select", "s => s.value") == str(base)   # the previous run
    totals = {r: page.request.get(f"/api/v1/runs/{r}/summary").json()["totals"] for r in (base, head)}
    span = page.eval_on_selector("#kpi-deltas tr[data-key=span_ns]", "tr => Number(tr.dataset.delta)")
    assert span == totals[head]["span_ns"] - totals[base]["span_ns"]
    assert page.locator("#rank-deltas tbody tr").count() == 2
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    signed_in.shot("compare-ranks")
    # trends: labelled x axis, tag filter, metric picker
    page.goto("/jobs/readable?tag=branch%3Dmain")
    assert page.locator("#trend-goodput svg circle").count() == 2
    assert page.eval_on_selector_all("#trend-goodput svg text.xsha", "ts => ts.map(t => t.textContent)") == [
        "1111111", "2222222"]
    options = page.eval_on_selector_all("#trend-metric option", "os => os.map(o => o.value)")
    rule = next(o for o in options if o.startswith("rule:"))
    page.select_option("#trend-metric", rule)
    page.wait_for_function("r => document.getElementById('trend-picked').dataset.metric === r", arg=rule)
    assert page.locator("#trend-picked svg circle").count() == 2
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    signed_in.shot("job-trends")
    # /rules#rule-COMM002 opens that entry, its doc rendered (no raw *markup*)
    page.goto("/rules#rule-COMM002")
    entry = page.locator("#rule-COMM002")
    assert entry.evaluate("d => d.open")
    assert entry.locator("em", has_text="Why it matters").count() == 1
    assert "*Why" not in entry.inner_text()
    assert not signed_in.errors
    page.goto("/runs/987654")                 # a 404 page keeps the navigation
    assert page.locator("header.top a", has_text="Runs").count() == 1


# The middle of the widest phase band drawn for a group, in page coordinates (the header row, free of boxes).
BAND_POINT = """([root, name]) => {
    const tl = root.gpTimeline, r = root.querySelector('canvas').getBoundingClientRect();
    const band = JSON.parse(root.dataset.phases).filter(b => b.name === name).sort((a, b) => (b.x1 - b.x0) - (a.x1 - a.x0))[0];
    const head = tl.lay.rows.find(row => row.head && row.group.label === band.group);
    return {x: r.left + (band.x0 + band.x1) / 2, y: r.top + head.y + 8, label: band.group};
}"""


def test_phases_are_drawn_per_rank_with_the_analysis_window(signed_in, store) -> None:
    """A report with a step loop: its start-up, warm-up, steady and teardown phases as bands on the run clock,
    the analysis window marked, and the phase's reason on hover (as text)."""
    run_id = store([corpus_file("cupy-power-iteration.sqlite")], job="phases")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    _open_run(page, run_id)
    tl = page.locator("#timeline")
    body = page.evaluate("async (id) => (await fetch(`/runs/${id}/timeline.json?buckets=300`)).json()", run_id)
    [item] = body["phases"]
    # the read-back copies after the last iteration are the loop's epilogue, not teardown
    assert [p["name"] for p in item["phases"]] == ["startup", "steady", "epilogue", "teardown"]
    view = page.evaluate("() => document.getElementById('timeline').gpTimeline.view")
    shown = [p for p in item["phases"] if p["end_ns"] >= view[0] and p["start_ns"] <= view[1]]
    assert [p["name"] for p in shown][:2] == ["startup", "steady"]   # start-up: 0.55 ms, still drawn
    drawn = json.loads(tl.get_attribute("data-phases"))
    groups = [g["label"] for g in json.loads(tl.get_attribute("data-layout"))]
    # every group of the report carries every phase, at the x of its run-clock bounds
    x = lambda t: page.evaluate("t => document.getElementById('timeline').gpTimeline.x(t)", t)  # noqa: E731
    right = page.evaluate("() => 230 + document.getElementById('timeline').gpTimeline.plotWidth()")
    for label in groups:
        mine = [b for b in drawn if b["group"] == label]
        assert [b["name"] for b in mine] == [p["name"] for p in shown]
        for b, p in zip(mine, shown, strict=True):
            assert abs(b["x0"] - max(230, x(p["start_ns"]))) <= 1 and abs(b["x1"] - min(x(p["end_ns"]), right)) <= 1
    windows = json.loads(tl.get_attribute("data-windows"))
    assert [w["group"] for w in windows] == groups and {w["spec"] for w in windows} == {"steady"}
    steady = next(p for p in item["phases"] if p["name"] == "steady")
    w = item["window"]
    # the default window is the steady phase and the loop's epilogue (its read-back copies)
    tail = next((p for p in item["phases"] if p["name"] == "epilogue"), steady)
    assert w["phase"] == "steady" and steady["start_ns"] <= w["start_ns"] < w["end_ns"] <= tail["end_ns"]
    assert abs(windows[0]["x0"] - x(w["start_ns"])) <= 1 and abs(windows[0]["x1"] - x(w["end_ns"])) <= 1
    # the band's reason on hover, as text only
    page.eval_on_selector("#timeline canvas", "c => c.scrollIntoView({block: 'start'})")
    pt = page.evaluate(BAND_POINT, [tl.element_handle(), "steady"])
    page.mouse.move(pt["x"], pt["y"])
    tip = page.locator("#timeline .tl-tip")
    page.wait_for_function("() => !document.querySelector('#timeline .tl-tip').hidden")
    text = tip.inner_text()
    assert text.startswith("steady phase · ") and steady["reason"] in text and "inside the analysis window" in text, text
    assert tip.evaluate("t => t.children.length") == 0
    signed_in.shot_of("#timeline", "timeline-phases")
    assert not signed_in.errors


def test_job_page_ncu_kernel_trends(signed_in, store) -> None:
    """ncu KPIs per kernel on the job page: four charts for the chosen kernel, redrawn on another choice."""
    for _ in range(2):
        store([corpus_file("numba-copy-blocked-full.csv")], job="ncu-browser")
    store([corpus_file("pytorch-sgemm-small.csv")], job="ncu-browser")
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/jobs/ncu-browser")
    box = page.locator("#ncu-trends")
    kernels = json.loads(box.get_attribute("data-ncu"))["kernels"]
    assert len(kernels) == 3
    first = kernels[0]
    assert box.get_attribute("data-kernel") == first["name"]
    drawn = page.locator("#ncu-trends .card svg.trend")
    assert drawn.count() == len(first["series"])
    for kpi, series in first["series"].items():
        circles = page.locator(f"#ncu-trend-{kpi} svg circle")
        assert circles.count() == sum(p["value"] is not None for p in series["points"])
    page.select_option("#ncu-kernel", "2")
    assert box.get_attribute("data-kernel") == kernels[2]["name"]
    assert page.locator("#ncu-trends .card svg.trend").count() == len(kernels[2]["series"])
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    signed_in.shot("job-ncu-trends")
    assert not signed_in.errors


def test_storage_section_and_by_kernel_collectives_in_the_browser(signed_in, store) -> None:
    """A run with an OS runtime trace shows each rank's storage I/O (the table's rows equal the stored summary);
    COMM003's by-kernel finding of an NCCL run sits under "minor" with its evidence formatted, and neither page
    scrolls sideways at 1280 px."""
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    run_id = store([corpus_file("cloverleaf-devsync.sqlite")], job="storage-io")
    page.goto(f"/runs/{run_id}")
    section = page.locator("#system-metrics details.system-report")
    assert section.count() == 1 and section.evaluate("d => d.open")
    (report,) = page.request.get(f"/api/v1/runs/{run_id}/summary").json()["reports"]
    storage = report["data"]["system_metrics"]["storage"]
    kinds = section.locator("table.storage-io tbody tr").evaluate_all("rs => rs.map(r => r.dataset.kind)")
    assert kinds == [r["kind"] for r in storage] and "write" in kinds
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    signed_in.shot_of("#system-metrics", "run-storage-io")
    run_id = store([corpus_file(TORCHRUN)], job="by-kernel")
    page.goto(f"/runs/{run_id}")
    minor = page.locator("#minor-findings")
    minor.locator(":scope > summary").click()
    finding = minor.locator("details.finding[data-rule=COMM003]")
    assert finding.count() == 1 and finding.get_attribute("data-severity") == "info"
    finding.locator(":scope > summary").click()
    assert "no message sizes" in finding.locator(".title").inner_text()
    assert finding.locator("table.evidence tbody tr").count() >= 1
    # the group table: SendRecv with each process's (GPU's) share, as in the API's finding
    (api,) = [f for f in page.request.get(f"/api/v1/runs/{run_id}/findings").json()["items"]
              if f["rule_id"] == "COMM003"]
    group = finding.locator("table.collective-groups tbody tr.collective-group")
    groups = api["extra"]["groups"]
    assert group.count() == len(groups) == 1
    assert group.locator("td").first.inner_text() == "SendRecv"
    shares = group.locator("td.per-rank span.kv").all_inner_texts()
    assert [s.split()[:4] for s in shares] == [["pid", str(e["pid"]), "GPU", str(e["device"])]
                                               for e in groups[0]["ranks"]]
    signed_in.shot_of("details.finding[data-rule=COMM003]", "comm003-by-kernel")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280


def _smaller_sends(dst) -> tuple:
    """A copy of rank 1 of the pair whose network sends on channel 1 carry a quarter of the bytes (the pair
    sends the same both ways), and its bytes sent per receiver by direct SQL on the NVTX text."""
    import re
    import shutil
    import sqlite3

    shutil.copyfile(corpus_file(NCCL_R1), dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    with con:
        con.execute("UPDATE NVTX_EVENTS SET text = replace(text, 'Data_Size: 1048576', 'Data_Size: 262144') "
                    "WHERE text LIKE 'ncclNetIsend(): %' AND text LIKE '%Channel_ID: 1,%'")
    sent: dict[int, int] = {}
    for (text,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'ncclNetIsend(): %'"):
        size, receiver = re.search(r"Data_Size: (\d+), Sender_Rank: \d+, Receiver_Rank: (\d+)", text).groups()
        sent[int(receiver)] = sent.get(int(receiver), 0) + int(size)
    con.close()
    return dst, sent


def test_network_heat_map_shades_by_bytes_and_marks_the_slowest_link(signed_in, store, tmp_path) -> None:
    r1, sent_by_r1 = _smaller_sends(tmp_path / "r1-smaller-sends.sqlite")
    run_id = store([corpus_file(NCCL_R0), r1], job="network", tags={"nodes": "2"})
    page = signed_in.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/runs/{run_id}")
    net = page.request.get(f"/api/v1/runs/{run_id}/summary").json()["network"]
    links = {(link["sender"], link["receiver"]): link for link in net["links"]}
    assert len(links) >= 2, links
    cells = page.locator("#network-matrix td[data-bytes]")
    page.wait_for_function("() => document.querySelector('#network-matrix td[data-bytes]').style.background !== ''")
    drawn = cells.evaluate_all("""tds => tds.map(td => ({
        sender: Number(td.closest('tr').dataset.rank), receiver: Number(td.dataset.receiver),
        bytes: Number(td.dataset.bytes), title: td.title, slowest: td.classList.contains('slowest'),
        alpha: Number((getComputedStyle(td).backgroundColor.match(/rgba?\\(([^)]*)\\)/)[1].split(',')[3] || 1)),
        outline: getComputedStyle(td).outlineStyle}))""")
    assert {(c["sender"], c["receiver"]) for c in drawn} == set(links)
    # rank 1's sends: the bytes its export's NVTX text says, fewer than rank 0's
    assert sent_by_r1
    assert {r: links[(1, r)]["bytes"] for r in sent_by_r1} == sent_by_r1
    assert links[(1, 0)]["bytes"] < links[(0, 1)]["bytes"]
    # darker = more bytes: the shading's opacity orders the cells as their bytes do, the largest darkest
    by_bytes = sorted(drawn, key=lambda c: c["bytes"])
    assert [c["alpha"] for c in by_bytes] == sorted(c["alpha"] for c in drawn)
    assert by_bytes[-1]["alpha"] > by_bytes[0]["alpha"]
    for c in drawn:
        link = links[(c["sender"], c["receiver"])]
        assert c["bytes"] == link["bytes"]
        # the hover title: the bytes (exact too), sends and bandwidth of the API's JSON, through fmt
        assert (f"{fmt.size(link['bytes'])} ({fmt.count(link['bytes'])} B) in {fmt.count(link['transfers'])} transfers, "
                f"{fmt.rate(link['bandwidth_bps'])}") in c["title"], c["title"]
    # the slowest link (lowest achieved bandwidth) is the one marked, and only it
    slowest = net["slowest"]
    assert min(links.values(), key=lambda x: x["bandwidth_bps"])["sender"] == slowest["sender"]
    marked = [c for c in drawn if c["slowest"]]
    assert [(c["sender"], c["receiver"]) for c in marked] == [(slowest["sender"], slowest["receiver"])]
    assert marked[0]["outline"] == "solid" and "the slowest link" in marked[0]["title"]
    assert page.locator("#network-matrix td.slowest .slowest-mark").inner_text().lower() == "slowest"
    text = page.locator("#network-slowest").inner_text()
    assert f"rank {slowest['sender']}" in text and f"rank {slowest['receiver']}" in text
    page.wait_for_load_state("networkidle")  # the timeline and tables above are drawn: the layout is final
    page.eval_on_selector("#network", "e => e.scrollIntoView({block: 'start'})")
    page.locator("#network-matrix td.slowest").hover()
    signed_in.shot_of("#network", "run-network-heat-map")
    assert signed_in.errors == [] and signed_in.dialogs == []
