"""Every corpus export through every nsys rule: no rule errors, idle impacts partition NVIDIA's gaps, and the
real multi-rank/NCCL exports give the communication findings that are true of them."""

from __future__ import annotations

import jsonschema_rs
import pytest

from analysis import fmt
from analysis.api import analyze, result_schema
from analysis.model.trace import Trace
from tests.analysis.planting import ingested, raw_gaps
from tests.analysis.test_result_parts import assert_round_trip
from tests.conftest import NSYS_FILES, corpus_file

IDS = [p.name.split("__")[-1] for p in NSYS_FILES]
RESULT_SCHEMA = jsonschema_rs.Draft202012Validator(result_schema())

# NVIDIA's pairing, written here independently of analysis.model.intervals, on the normalized tables: the gaps
# as (pid, device, start_ns, end_ns) in ``gaps``.
PAIRING_CTE = """
WITH g AS (
    SELECT pid, device, start_ns, end_ns FROM kernels
    UNION ALL SELECT pid, device, start_ns, end_ns FROM memcpy
    UNION ALL SELECT pid, device, start_ns, end_ns FROM memset),
span AS (SELECT pid, device, MIN(start_ns) lo, MAX(end_ns) hi FROM g GROUP BY ALL),
ops AS (
    SELECT * FROM g
    UNION ALL SELECT o.pid, s.device, GREATEST(o.start_ns, s.lo), LEAST(o.end_ns, s.hi)
    FROM overhead o JOIN span s ON s.pid = o.pid AND o.start_ns < s.hi AND o.end_ns > s.lo),
st AS (SELECT pid, device, start_ns, ROW_NUMBER() OVER (PARTITION BY pid, device ORDER BY start_ns) n FROM ops),
en AS (SELECT pid, device, end_ns, ROW_NUMBER() OVER (PARTITION BY pid, device ORDER BY end_ns) n FROM ops),
gaps AS (SELECT st.pid, st.device, en.end_ns AS start_ns, st.start_ns AS end_ns
         FROM st JOIN en ON st.pid = en.pid AND st.device = en.device AND st.n = en.n + 1
         WHERE st.start_ns > en.end_ns)
"""
DIRECT_GAPS_SQL = PAIRING_CTE + "SELECT COALESCE(SUM(end_ns - start_ns), 0), COUNT(*) FROM gaps"  # noqa: S608 - constants

# With GPU001 taking every gap, the idle-owning rules split all idle between them.
ALL_GAPS = {"GPU001.min_gap_us": 0, "SYNC001.min_idle_us": 0, "KRN001.min_idle_us": 0, "HOST001.min_idle_us": 0,
            "MEM006.min_idle_us": 0, "HOST003.min_idle_us": 0, "HOST004.min_idle_us": 0, "MEM002.min_idle_us": 0}
# The rules that then own every idle nanosecond once: by the gap table, and by what the host was doing.
IDLE_OWNERS = ("GPU001", "SYNC001", "MEM002", "HOST001", "MEM006", "HOST003", "HOST004", "MEM004")


def _owned_idle(findings: list[dict]) -> int:
    """The idle the owners hold: their impacts, but MEM004's owned idle (its impact adds migration-only time)."""
    return sum(f["idle_ns"] if f["rule_id"] == "MEM004" else f["impact_ns"] for f in findings
               if f["rule_id"] in IDLE_OWNERS)


@pytest.mark.parametrize("window", ["steady", "all"])
@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_corpus_file_analyzes_without_errors(src, window) -> None:
    result = analyze([ingested(src)], window=window).to_json()
    assert RESULT_SCHEMA.is_valid(result), next(iter(RESULT_SCHEMA.iter_errors(result)), None)
    assert_round_trip(result)  # the typed parts read back and write the same JSON text
    assert [r for r in result["rules"] if r["status"] == "error"] == []
    for f in result["findings"]:
        assert f["impact_ns"] >= 0 and f["severity"] in ("critical", "warning", "info")
        assert len(f["evidence"]) <= 20 and f["evidence_total"] >= len(f["evidence"])
    # Ranked by impact; evidence-only findings (owns_idle False: HOST002) after those that own the time.
    ranked = [(_evidence_only(f), -f["impact_ns"]) for f in result["findings"]]
    assert ranked == sorted(ranked)


@pytest.mark.parametrize("src", NSYS_FILES, ids=IDS)
def test_idle_impacts_partition_nvidia_gaps(src) -> None:
    path = ingested(src)
    trace = Trace(path, src.name)
    try:
        direct, n = trace.sql(DIRECT_GAPS_SQL)[0]
    finally:
        trace.close()
    result = analyze([path], thresholds=ALL_GAPS, window="all").to_json()
    owned = _owned_idle(result["findings"])
    assert owned == int(direct)


@pytest.mark.parametrize("short", ["tensorrt-3090.sqlite", "gaussian-threadsync.sqlite", "vecadd-2026.sqlite",
                                   "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"])
def test_gap_total_matches_raw_export(short, tmp_path) -> None:
    """The ingested gaps equal NVIDIA's pairing computed on the raw export (independent of ingest)."""
    import shutil
    import sqlite3

    src = corpus_file(short)
    shutil.copyfile(src, tmp_path / "raw.sqlite")
    con = sqlite3.connect(tmp_path / "raw.sqlite")
    raw = sum(e - s for _, _, s, e in raw_gaps(con))
    con.close()
    result = analyze([ingested(src)], thresholds=ALL_GAPS, window="all").to_json()
    owned = _owned_idle(result["findings"])
    assert owned == raw


def _nccl_ring():
    return ingested(corpus_file("nccl-ring-2node-r0-ault43.sqlite")), ingested(corpus_file("nccl-ring-2node-r1-ault44.sqlite"))


def test_nccl_ring_two_nodes_as_one_run() -> None:
    r0, r1 = _nccl_ring()
    expected = {}
    for path in (r0, r1):
        t = Trace(path, path.name)
        try:
            dur, start = t.sql("SELECT end_ns - start_ns, start_ns FROM kernels WHERE category = 'nccl'")[0]
            expected[t.rank] = (dur, start + t.session_start_utc_ns)
            # The only kernel is the collective: all of it is exposed.
            assert t.scalar("SELECT COUNT(*) FROM kernels WHERE category = 'compute'") == 0
        finally:
            t.close()
    assert set(expected) == {0, 1}
    for order in ([r0, r1], [r1, r0]):  # the rank comes from the report, not the file order
        result = analyze(order, rules=["COMM"], window="all").to_json()
        # One COMM001 for the run, each rank's exposed time in per_rank; each report keeps its own finding. With
        # no compute, all of a rank's collective is exposed, less its wait for the last rank (COMM002's, not
        # counted twice: issue #41).
        last = max(v[1] for v in expected.values())
        exposed = {k: v[0] - (last - v[1]) for k, v in expected.items()}
        (comm1,) = [f for f in result["findings"] if f["rule_id"] == "COMM001"]
        assert {r["rank"]: r["impact_ns"] for r in comm1["per_rank"]} == exposed
        assert comm1["impact_ns"] == sum(exposed.values())
        own = {f["rank"]: f["impact_ns"] for rep in result["reports"] for f in rep["findings"] if f["rule_id"] == "COMM001"}
        assert own == exposed
        (straggler,) = [f for f in result["findings"] if f["rule_id"] == "COMM002"]
        late = max(expected, key=lambda k: expected[k][1])
        assert straggler["rank"] == late
        assert straggler["impact_ns"] == abs(expected[1][1] - expected[0][1])
        assert comm1["impact_ns"] + straggler["impact_ns"] == sum(v[0] for v in expected.values())


def _union(ivs):
    out = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(ivs):
    return sum(e - s for s, e in ivs)


def test_torchrun_two_ranks_in_one_file() -> None:
    path = ingested(corpus_file("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite"))
    t = Trace(path, path.name)
    try:
        rows = t.sql("SELECT pid, device, start_ns, end_ns, category, stream FROM kernels")
    finally:
        t.close()
    exposed = {}
    for pid in {r[0] for r in rows}:
        comp = _union([(r[2], r[3]) for r in rows if r[0] == pid and r[4] == "compute"])
        both = _union([(r[2], r[3]) for r in rows if r[0] == pid])
        exposed[pid] = _length(both) - _length(comp)
    assert len(exposed) == 2 and all(v > 0 for v in exposed.values())
    result = analyze([path], rules=["COMM"], thresholds={"COMM001.min_exposed_pct": 0}, window="all").to_json()
    # Each rank runs its NCCL kernels on its compute stream: all the exposed time is COMM004's, none COMM001's.
    assert {(r[0], r[5]) for r in rows if r[4] == "nccl"} <= {(r[0], r[5]) for r in rows if r[4] == "compute"}
    (c4,) = [f for f in result["findings"] if f["rule_id"] == "COMM004"]
    assert {d["pid"]: d["exposed_ns"] for d in c4["devices"]} == exposed
    assert c4["impact_ns"] == sum(exposed.values())
    assert [f for f in result["findings"] if f["rule_id"] == "COMM001"] == []
    (c2,) = [f for f in result["findings"] if f["rule_id"] == "COMM002"]
    assert len(c2["participants"]) == 2 and c2["impact_ns"] > 0


def test_single_rank_without_nccl_has_no_comm_findings() -> None:
    result = analyze([ingested(corpus_file("saxpy-mpi-rank0-perlmutter.sqlite"))], rules=["COMM"]).to_json()
    assert result["findings"] == []
    assert {r["id"]: r["status"] for r in result["rules"]} == {"COMM001": "ok", "COMM002": "ok", "COMM003": "ok",
                                                               "COMM004": "ok", "COMM005": "ok"}


def _evidence_only(f: dict) -> bool:
    return (f["owns_idle"] if "owns_idle" in f else (f.get("extra") or {}).get("owns_idle")) is False


def test_mem002_without_blocking_copies_says_what_held_the_host() -> None:
    """The OpenACC export's cuMemcpyHtoDAsync calls are no blocking copies by NVIDIA's rule, yet its launching
    thread sat in them while the GPU idled: MEM002 owns that idle and says so, naming the calls with their time,
    never "0 blocking memcpy call(s)"."""
    result = analyze([ingested(corpus_file("openacc-report12-nometa.sqlite"))]).to_json()
    (f,) = [f for f in result["findings"] if f["rule_id"] == "MEM002"]
    assert f["copies"] == 0 and f["impact_ns"] == f["idle_ns"] > 0
    assert f["title"].startswith("GPU idle ") and "inside copy calls that held the host (cuMemcpyHtoDAsync)" in f["title"]
    assert "0 blocking" not in f["message"] and "cuMemcpyHtoDAsync" in f["message"]
    top = f["names"][0]
    assert top["name"] == "cuMemcpyHtoDAsync" and top["ns"] <= f["impact_ns"] and top["calls"] > 0


@pytest.mark.parametrize(("name", "key"), [("saxpy-mpi-rank0-perlmutter.sqlite", "host_cpu"),
                                           ("cupy-power-iteration.sqlite", "user_range"),
                                           ("pytorch-nvfuser-h200.sqlite", "no_activity")])
def test_gpu001_advice_follows_what_the_anatomy_saw_in_its_idle(name: str, key: str) -> None:
    """GPU001's idle with no CUDA or OS call is told by what the anatomy did see there: CPU samples of the launching
    thread (saxpy: 542 of 546 ms), the program's own NVTX ranges (cupy: 633 ms), or nothing (nvFuser: 2.28 s of
    'none'), each with its own advice; the cause's wording never says "no recorded host activity"."""
    from analysis.diagnosis.rules.nsys.gpu import ADVICE

    result = analyze([ingested(corpus_file(name))]).to_json()
    (f,) = [f for f in result["findings"] if f["rule_id"] == "GPU001"]
    cats = f["by_category"]
    assert f["main_cause"] == "no_activity" and max(cats, key=cats.get) == ("none" if key == "no_activity" else key)
    # The three captures sampled the CPU or did not need to ask (issue #39 class 5): no advice asks for samples.
    assert f["advice"] == ADVICE[key].replace("; else sample the CPU with nsys --sample=cpu", "")
    assert "no recorded host activity" not in f["message"]


def test_small_copies_are_sized_in_bytes_or_kb_not_zero_mib() -> None:
    """devsync-heavy's three blocking copies move a few bytes: MEM002 says how many (its ``bytes``, through the one
    formatting module's decimal units), not 0.0 MiB."""
    result = analyze([ingested(corpus_file("devsync-heavy-report13.sqlite"))]).to_json()
    (f,) = [f for f in result["findings"] if f["rule_id"] == "MEM002"]
    assert 0 < f["bytes"] < 2**20 and f["copies"] == 3
    size = fmt.size(f["bytes"])  # "40.0 kB": the one formatting module's sizes (tested in test_fmt)
    assert f"3 blocking memcpy call(s) ({size})" in f["message"] and "0.0 MiB" not in f["message"]
