"""The run page's network path from an NCCL log uploaded with an nsys export of the same run: node x node and
rank x rank transports equal to the log's own connection lines, the join with the export, and every string of
the log escaped (a planted ``<script>`` in a hostname and markup in a WARN line)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

from analysis import fmt
from tests.conftest import corpus_dir, corpus_file
from tests.nccl_planted import ault_log_of_ring_rank0
from tests.web import seed

AULT = corpus_dir() / "nccl" / "ZhiyiHu1999__DistributedSysLab_FS24__ault-2x2-shm-socket-tree-simple-2.17.log"
HOST = "ault44" + seed.XSS_SCRIPT
CHANNEL = re.compile(r"Channel \d+(?:/\d+)? : (\d+)\[\w+\] -> (\d+)\[\w+\] (?:\[\w+\] )?via (\S+)")


def planted_log(out: Path) -> Path:
    """The corpus log with a hostname that is markup, and one WARN line that is markup too; its rank 0 is the
    process the nccl-ring-2node rank 0 export recorded (``ault_log_of_ring_rank0``), so that export joins it."""
    text = AULT.read_text().replace("ault44", HOST)
    text += f"ault43:609484:609484 [0] NCCL WARN {seed.XSS_IMG} NET/Socket : peer closed\n"
    out.write_text(ault_log_of_ring_rank0(text))
    return out


def _transports(path: Path) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for line in path.read_text().splitlines():
        if m := CHANNEL.search(line):
            out[(int(m.group(1)), int(m.group(2)))] = m.group(3)
    return out


def test_the_run_page_shows_the_path_and_escapes_the_log(client, db, settings, ingested, tmp_path) -> None:
    log = planted_log(tmp_path / "job.log")
    export = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    run_id = seed.store_run(db, settings, ingested, [log, export], job="nccl-path")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    # Nothing of the log reaches the page as markup.
    assert seed.XSS_SCRIPT not in html and seed.XSS_IMG not in html
    assert "ault44&lt;script&gt;alert(1)&lt;/script&gt;" in html
    section = html.split('id="nccl-path"')[1]
    assert "&lt;img src=x onerror=alert(1)&gt;" in section  # the WARN line, shown as text
    # Rank x rank: each cell's transport family and inter/intra mark equal the log's connection lines.
    table = section.split('id="nccl-ranks"')[1].split("</table>")[0]
    seen = {}
    for sender, row in re.findall(r'<tr data-rank="(\d+)">(.*?)</tr>', table, re.S):
        for j, cell in enumerate(re.findall(r"<td(.*?)</td>", row, re.S)):
            if "data-inter" in cell:
                inter = re.search(r'data-inter="(\w*)"', cell).group(1)
                seen[(int(sender), j)] = (inter, unescape(re.sub(r"<[^>]+>", " ", cell.split(">", 1)[1])).split()[0])
    expected = {pair: ("inter" if t.startswith("NET/") else "intra", "NET/Socket" if t.startswith("NET/") else "SHM")
                for pair, t in _transports(log).items()}
    assert seen == expected and len(expected) == 8
    # Node x node: both nodes, the hostname escaped in its header.
    nodes = section.split('id="nccl-nodes"')[1].split("</table>")[0]
    assert "<th>ault43</th>" in nodes and "<th>ault44&lt;script&gt;alert(1)&lt;/script&gt;</th>" in nodes
    assert "NET/Socket" in nodes and "SHM" in nodes
    assert unescape(re.search(r'id="nccl-inter">(.*?)</strong>', section).group(1)) == "NET/Socket"
    # The export (ault43, rank 0, its process) is joined to the log's rank 0; the verdict carries the log's sentence.
    joined = unescape(re.search(r'id="nccl-joined">(.*?)</p>', section, re.S).group(1))
    assert export.name in joined and "rank 0" in joined
    assert "Across nodes, AllReduce runs over NET/Socket." in " ".join(re.sub(r"<[^>]+>", "", joined).split())
    verdict = unescape(html.split('id="verdict"')[1].split("</div>")[0])
    assert "NCCL log" in verdict and "socket" in verdict.lower()


def test_the_api_returns_the_network_path(client, db, settings, ingested, tmp_path) -> None:
    log = planted_log(tmp_path / "job.log")
    run_id = seed.store_run(db, settings, ingested, [log], job="nccl-api")
    summary = client.get(f"/api/v1/runs/{run_id}/summary").get_json()
    path = summary["network_path"]
    assert path["report"] == "job.log"
    assert [n["host"] for n in path["nodes"]] == ["ault43", HOST]  # as found: escaping is the page's job
    assert {(p["src"], p["dst"]) for p in path["pairs"]} == set(_transports(log))
    assert summary["verdict"]["kind"] == "network" and summary["verdict"]["rule_id"] == "NET001"


def test_a_logs_report_drill_downs_answer_without_a_server_error(client, db, settings, ingested, tmp_path) -> None:
    import sqlalchemy as sa

    from app.models import Report

    log = planted_log(tmp_path / "job.log")
    run_id = seed.store_run(db, settings, ingested, [log], job="nccl-drill")
    report_id = db.scalar(sa.select(Report.id).where(Report.run_id == run_id, Report.kind == "nccl"))
    assert report_id is not None
    tables = client.get(f"/runs/{run_id}/reports/{report_id}/tables.json")
    assert tables.status_code == 200 and tables.get_json()["kernels"] == []
    for what in ("timeline.json", "trace.json"):
        resp = client.get(f"/runs/{run_id}/reports/{report_id}/{what}")
        assert resp.status_code < 500, (what, resp.status_code)


def test_per_rank_logs_with_the_exports_show_one_path_and_each_links_bandwidth(client, db, settings, ingested,
                                                                               tmp_path) -> None:
    """A run uploaded as the two ranks' NCCL_DEBUG_FILE logs and their nsys exports: one path for the job, each
    link's achieved bandwidth next to NET/Socket; a log of another job (the ault 2x2 log, with a hostname that is
    markup) is left out and named, escaped, on the page and in the API's run warnings."""
    from tests.nccl_planted import RING_EXPORTS, export_pids, ring_2node_rank_logs

    logs = ring_2node_rank_logs(tmp_path)
    [pid0] = export_pids(RING_EXPORTS[0])
    other = planted_log(tmp_path / "other.log")
    # rank 0 again, as another process on a host whose name is markup (a restart): the reason names it
    evil = tmp_path / "evil.log"
    evil.write_text(logs[0].read_text().replace(f"ault43:{pid0}:{pid0}", f"ault43{seed.XSS_SCRIPT}:1999:1999"))
    r0, r1 = corpus_file("nccl-ring-2node-r0-ault43.sqlite"), corpus_file("nccl-ring-2node-r1-ault44.sqlite")
    run_id = seed.store_run(db, settings, ingested, [logs[0], r0, other, logs[1], r1, evil], job="nccl-ranks")
    summary = client.get(f"/api/v1/runs/{run_id}/summary").get_json()
    path = summary["network_path"]
    assert [f["file"] for f in path["files"]] == [logs[0].name, logs[1].name]
    assert [x["file"] for x in path["left_out"]] == ["other.log", "evil.log"]
    assert path["left_out"][1]["reason"] == (f"another job: rank 0 is ault43{seed.XSS_SCRIPT}:1999 there, "
                                             f"ault43:{pid0} in the job")
    assert any(w["code"] == "nccl_logs_left_out" and w["reports"] == ["other.log", "evil.log"]
               for w in summary["run_warnings"])
    measured = {(k["sender"], k["receiver"]): k["bandwidth_bps"] for k in summary["network"]["links"]}
    assert {(k["sender"], k["receiver"]): (k["transports"], k["bandwidth_bps"]) for k in path["links"]} == {
        pair: (["NET/Socket/0"], bw) for pair, bw in measured.items()} and len(measured) == 2
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert seed.XSS_SCRIPT not in html and seed.XSS_IMG not in html
    section = html.split('id="nccl-path"')[1]
    assert f"Merged from 2 logs of one job: <code>{logs[0].name}</code>, <code>{logs[1].name}</code>" in section
    left = section.split('id="nccl-left-out"')[1].split("</div>")[0]
    assert "<code>other.log</code>: another job" in left
    assert "rank 0 is ault43&lt;script&gt;alert(1)&lt;/script&gt;:1999 there" in left
    links = section.split('id="nccl-links"')[1].split("</table>")[0]
    assert "the exports' ranks checked against the log's by host and process id</caption>" in links
    for (src, dst), bw in measured.items():
        row = links.split(f'data-link="{src}-{dst}"')[1].split("</tr>")[0]
        assert "<strong>NET/Socket/0</strong>" in row and fmt.si(bw * 8, "b/s") in row


def test_an_export_of_another_run_is_named_not_joined(client, db, settings, ingested, tmp_path) -> None:
    """The corpus' ault log as found beside the nccl-ring-2node rank 0 export: the export's process (direct SQL
    on it) is no rank of the log, so the page says it is not joined, and why, instead of claiming rank 0."""
    from tests.nccl_planted import RING_EXPORTS, export_pids

    [pid] = export_pids(RING_EXPORTS[0])
    log = tmp_path / "job.log"
    log.write_text(AULT.read_text())
    export = corpus_file("nccl-ring-2node-r0-ault43.sqlite")
    run_id = seed.store_run(db, settings, ingested, [log, export], job="nccl-apart")
    path = client.get(f"/api/v1/runs/{run_id}/summary").get_json()["network_path"]
    assert "joined" not in path
    assert path["not_joined"] == [{"report": export.name, "reason": f"its processes ({pid} on ault43.cscs.ch) are "
                                                                    "no rank of the log: another run"}]
    section = client.get(f"/runs/{run_id}").get_data(as_text=True).split('id="nccl-path"')[1]
    assert 'id="nccl-joined"' not in section
    apart = unescape(re.search(r'id="nccl-not-joined">(.*?)</p>', section, re.S).group(1))
    assert re.sub(r"<[^>]+>", "", apart) == (f"Not joined with this log: {export.name}: its processes ({pid} on "
                                             "ault43.cscs.ch) are no rank of the log: another run.")
