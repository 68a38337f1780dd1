"""The analysis in two steps: each report on its own, then the run over the reports' facts.

``analyze_run`` (the offline CLI) is the two steps in one process; the service runs step 1 in one task
per report (any order, any worker, results through JSON and parquet files) and step 2 once. These tests
check that the split cannot change a result: steps run separately, in another order, through the
files, with the traces gone before step 2, give the offline result exactly; and the facts hold what
the reports hold (direct queries)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import duckdb
import pytest

from analysis.api import ingest
from analysis.diagnosis.rules.base import RuleContext
from analysis.diagnosis.rules.nsys.comm import Stragglers
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.trace import Run, Trace
from analysis.run.facts import COLLECTIVES_FILE, KIND_RE
from analysis.run.runner import ReportResult, analyze_report, analyze_run, analyze_run_facts, make_context
from tests.analysis.many_ranks import COLLECTIVES, R0, R1, build_run
from tests.analysis.planting import ingested
from tests.conftest import corpus_file

N = 6
DELAYED = 3


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("ranks")
    outs = []
    for src in build_run(folder / "raw", n=N, delayed=DELAYED):
        out = folder / (src.stem + ".duckdb")
        ingest(src, out)
        outs.append(out)
    return outs


def _labels(paths: list[Path]) -> list[str]:
    return [p.stem + ".sqlite" for p in paths]


def test_steps_apart_in_any_order_through_files_equal_the_offline_run(ranks, tmp_path) -> None:
    offline = analyze_run(ranks, labels=_labels(ranks)).to_json()
    ctx = make_context()
    work = tmp_path / "reports"
    # Step 1 in reverse order, each into its own folder, then read back from the files as the service does.
    for i in reversed(range(len(ranks))):
        analyze_report(ranks[i], _labels(ranks)[i], ctx, work / str(i)).save(work / str(i))
    # Step 2 never opens a trace: move them all away first.
    gone = tmp_path / "gone"
    gone.mkdir()
    for p in ranks:
        shutil.move(str(p), gone / p.name)
    try:
        results = [ReportResult.load(work / str(i)) for i in range(len(ranks))]
        split = analyze_run_facts(results, ctx).to_json()
    finally:
        for p in ranks:
            shutil.move(str(gone / p.name), p)
    assert json.dumps(split, sort_keys=True) == json.dumps(offline, sort_keys=True)
    (straggler,) = [f for f in offline["findings"] if f["rule_id"] == "COMM002"]
    assert straggler["rank"] == DELAYED and straggler["report"] is None
    assert straggler["title"] == f"Straggler: rank {DELAYED} arrives last at {COLLECTIVES} of {COLLECTIVES} skewed collectives"
    assert set(straggler["participants"]) == {f"rank {k}" for k in range(N)}


def test_comm002_from_facts_equals_comm002_on_the_attached_traces(ranks) -> None:
    """The facts path against the rule reading every report attached to one connection (the old path), both
    on the whole reports (these ranks run no loop: by default each would judge its own work window)."""
    facts_path = analyze_run(ranks, labels=_labels(ranks), rules=["COMM002"], window="all").to_json()["findings"]
    params = default_registry().resolve_params(Stragglers, None)
    with Run.open(ranks, _labels(ranks)) as run:
        attached = [f.to_dict() for f in Stragglers().check(RuleContext(run, params=params, claimers=default_registry().idle_claimers()))]
    for f in facts_path:
        f.pop("phase")
    for f in attached:
        f.pop("phase")
    assert facts_path == attached and len(attached) == 1


def test_the_nccl_pair_gives_the_same_comm_findings_both_ways() -> None:
    paths = [ingested(corpus_file(R0)), ingested(corpus_file(R1))]
    labels = [R0, R1]
    out = analyze_run(paths, labels=labels).to_json()
    comm = [f for f in out["findings"] if f["rule_id"].startswith("COMM")]
    # COMM003 lists the collectives by kernel (no message sizes): informational, ranked last. One entry per
    # rule across the two ranks; each report keeps its own under reports[].findings.
    assert [f["rule_id"] for f in comm] == ["COMM001", "COMM002", "COMM003"]
    own = [f["rule_id"] for rep in out["reports"] for f in rep["findings"] if f["rule_id"].startswith("COMM")]
    assert sorted(own) == ["COMM001", "COMM001", "COMM003", "COMM003"]
    (c2,) = [f for f in comm if f["rule_id"] == "COMM002"]
    with Run.open(paths, labels) as run:
        (old,) = Stragglers().check(RuleContext(run, params=default_registry().resolve_params(Stragglers, None),
                                                       claimers=default_registry().idle_claimers()))
    assert (c2["impact_ns"], c2["rank"], c2["title"]) == (old.impact_ns, old.rank, old.title)
    assert c2["rank"] == 1 and c2["matched_collectives"] == 1


def test_facts_hold_every_nccl_kernel_of_the_report(ranks, tmp_path) -> None:
    ctx = make_context()
    res = analyze_report(ranks[DELAYED], "r.sqlite", ctx, tmp_path / "f")
    table = duckdb.read_parquet(str(tmp_path / "f" / COLLECTIVES_FILE))
    rows = table.order("start_ns").select("pid, device, name, kind, \"order\", start_ns, end_ns, size_bytes").fetchall()
    t = Trace(ranks[DELAYED], "r")
    try:
        direct = t.sql("SELECT pid, device, name, start_ns, end_ns FROM kernels WHERE category = 'nccl' "
                       "ORDER BY start_ns")
        assert t.rank == DELAYED
    finally:
        t.close()
    assert [(r[0], r[1], r[2], r[5], r[6]) for r in rows] == [tuple(d) for d in direct]
    assert len(rows) == COLLECTIVES and [r[4] for r in rows] == list(range(1, COLLECTIVES + 1))
    kinds = {r[3] for r in rows}
    m = re.search(KIND_RE, rows[0][2])
    assert kinds == {m.group(1) if m else None}
    assert all(r[7] is None for r in rows)  # message sizes: not in the normalized kernels table
    f = res.facts
    assert f["rank"] == DELAYED and f["nccl_in_window"] is True and f["session_start_utc_ns"] is not None
    assert f["iterations"] == {"start_ns": [], "end_ns": [], "busy_ns": []}  # no loop in this export
