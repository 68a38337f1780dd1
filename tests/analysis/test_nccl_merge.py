"""Several NCCL logs of one job (one file per process, ``NCCL_DEBUG_FILE=%h.%p``) as one network path.

The per-process files are cut from the real corpus logs at test time: every line with NCCL's
``host:pid:tid`` prefix goes to its process's file, every other line (the launcher's, the framework's, bare
version lines) to the job's stdout, as a job run with ``NCCL_DEBUG_FILE`` writes them. The merged path must
equal the whole log's; what only the stdout carried is absent exactly when the stdout is no NCCL log.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from analysis import network_path
from analysis.api import result_schema
from analysis.errors import TraceError
from analysis.readers.nccl import ingest, load, load_job
from analysis.run.nccl_step import analyze_logs, log_warnings

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "nccl"
LOGS = sorted(CORPUS.glob("*.log"))
PREFIX = re.compile(r"^(?:\s*\d+: )?([A-Za-z0-9_.-]+):(\d+):\d+ ")


def split_per_process(log: Path, out: Path) -> tuple[list[Path], Path]:
    """The log as its processes' NCCL_DEBUG_FILE files and the job's stdout."""
    files: dict[str, list[str]] = {}
    stdout: list[str] = []
    for line in log.read_text(errors="replace").splitlines(keepends=True):
        m = PREFIX.match(line)
        if m is None:
            stdout.append(line)
        else:
            files.setdefault(f"{m.group(1)}.{m.group(2)}", []).append(line)
    paths = []
    for name, lines in files.items():
        p = out / f"{name}.log"
        p.write_text("".join(lines))
        paths.append(p)
    job_out = out / "job.out"
    job_out.write_text("".join(stdout))
    return paths, job_out


def ingested(paths: list[Path]) -> list[tuple[Path, str]]:
    out = []
    for p in paths:
        db = p.with_suffix(p.suffix + ".duckdb")
        try:
            ingest(p, db)
        except TraceError as exc:
            assert exc.code in ("not_nccl_log", "empty_file"), exc
            continue
        out.append((db, p.name))
    return out


def facts(path: dict[str, Any]) -> dict[str, Any]:
    """The network path's facts, without line numbers (they are per file)."""
    return {
        "ranks": sorted((r["rank"], r["host"], r["pid"], r["cuda_dev"], r["bus_id"]) for r in path["ranks"]),
        "nodes": [(n["host"], n["ranks"], n["oob"]) for n in path["nodes"]],
        "pairs": [{k: v for k, v in p.items() if k != "lines"} for p in path["pairs"]],
        "node_links": path["node_links"], "rails": path["rails"], "nchannels": path["nchannels"],
        "nics": sorted((n["host"], n["index"], n["name"], n["kind"], n["speed_mbps"]) for n in path["nics"]),
        "gdr": sorted((g["host"], g["scope"], g["gpu"], g["hca"], g["enabled"], g["distance"]) for g in path["gdr"]),
        "rings": [(r["channel"], r["ranks"]) for r in path["rings"]],
        "trees": [(t["channel"], t["rank"], t["up"], t["down"]) for t in path["trees"]],
        "env": sorted((e["name"], e["value"], e["count"]) for e in path["env"]),
        "warnings": sorted((w["kind"], w["message"], w["rank"], w["nic"]) for w in path["warnings"]),
        "warning_counts": path["warning_counts"],
        "algo": sorted((a["coll"], a["bytes"], a["algo"], a["proto"], a["channels"], a["calls"])
                       for a in path["algo_calls"]),
        "tests": {k: v for k, v in path["nccl_tests"].items()
                  if k not in ("rows", "peak_line", "avg_line", "peak_file", "avg_file")},
        "failures": sorted((f["kind"], f["text"]) for f in path["failures"]),
        "version": path["version"],
    }


def _split_logs() -> list[Path]:
    """The corpus logs whose NCCL lines come from more than one process."""
    out = []
    for log in LOGS:
        procs = {m.group(1, 2) for line in log.read_text(errors="replace").splitlines() if (m := PREFIX.match(line))}
        if len(procs) > 1:
            out.append(log)
    return out


SPLIT = _split_logs()


def test_the_corpus_has_multi_process_logs_to_split() -> None:
    assert len(SPLIT) == 12, [p.name for p in SPLIT]


@pytest.mark.parametrize("log", SPLIT, ids=lambda p: p.name[:60])
def test_per_process_files_merge_into_the_whole_logs_path(log: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole.duckdb"
    ingest(log, whole)
    expected = facts(load(whole).path().to_json())
    procs, job_out = split_per_process(log, tmp_path)
    files = ingested([*procs, job_out])
    stdout_taken = any(label == "job.out" for _, label in files)
    job = load_job(files)
    assert not job.left_out
    assert len(job.files) == len(files) >= 2
    got = facts(job.log.path().to_json())
    if not stdout_taken:  # what only the launcher's stdout said (bare version line, srun/python errors) is gone
        stdout_only = ingested_alone_facts(log, tmp_path)
        for key in ("version", "failures"):
            if got[key] != expected[key]:
                assert got[key] == stdout_only[key], key
                expected[key] = got[key]
    assert got == expected
    # every line number of the merged log names its file and the line there
    for c in job.log.connections[:50]:
        file, at = job.log.where(c.line)
        assert file is not None and at is not None
        text = (tmp_path / file).read_text(errors="replace").splitlines()[at - 1]
        assert c.text is not None and c.text[:40] in text


def ingested_alone_facts(log: Path, tmp: Path) -> dict[str, Any]:
    """The facts of the log without its unprefixed lines (what the per-process files hold, together)."""
    kept = tmp / "prefixed-only.log"
    kept.write_text("".join(line for line in log.read_text(errors="replace").splitlines(keepends=True)
                            if PREFIX.match(line)))
    db = tmp / "prefixed-only.duckdb"
    ingest(kept, db)
    return facts(load(db).path().to_json())


def _pick(name: str) -> Path:
    return next(p for p in LOGS if name in p.name)


def test_findings_of_the_merged_job_point_into_each_rank_file(tmp_path: Path) -> None:
    """ault 2x2 over sockets: per-process files still give NET001, its evidence lines in the files that hold them."""
    log = _pick("ault-2x2-shm-socket")
    procs, _ = split_per_process(log, tmp_path)
    files = ingested(procs)
    results = analyze_logs(files, "all")
    lead = results[0]
    assert lead.info["network_path"]["files"][0] == {"file": files[0][1]}
    assert all(f.get("joined_by", "").startswith("commId 0x") for f in lead.info["network_path"]["files"][1:])
    net001 = [f for f in lead.findings if f.rule_id == "NET001"]
    assert net001 and net001[0].severity == "critical"
    checked = 0
    for ev in net001[0].evidence:
        d = ev.detail
        line = (tmp_path / d["file"]).read_text().splitlines()[d["line"] - 1]
        if not d.get("derived"):
            assert str(d["text"])[:40] in line
            checked += "NET/Socket" in line
    assert checked >= 1
    for other in results[1:]:
        assert other.findings == [] and other.info["nccl_merged_into"] == files[0][1]
        assert "network_path" not in other.info
    assert lead.info["nccl_verdict"]["rule_id"] == "NET001"


def test_a_rank_seen_in_several_files_counts_once(tmp_path: Path) -> None:
    """A node's combined log and one rank's own file overlap: the rank, its connections and WARN lines once."""
    log = _pick("perlmutter-2x4-roce-ibv_create_cq")
    whole = tmp_path / "whole.duckdb"
    ingest(log, whole)
    text = log.read_text(errors="replace").splitlines(keepends=True)
    node = tmp_path / "node0.log"   # the first node's lines (srun tasks 0-3)
    node.write_text("".join(line for line in text if re.match(r"^\s*[0-3]: ", line)))
    rank3 = tmp_path / "rank3.log"
    rank3.write_text("".join(line for line in text if re.match(r"^\s*3: ", line)))
    rest = tmp_path / "node1.log"
    rest.write_text("".join(line for line in text if not re.match(r"^\s*[0-3]: ", line)))
    files = ingested([node, rank3, rest])
    job = load_job(files)
    assert not job.left_out and len(job.files) == 3
    assert facts(job.log.path().to_json()) == facts(load(whole).path().to_json())


def test_the_same_file_twice_counts_once(tmp_path: Path) -> None:
    log = _pick("2x1-a100pcie-ib-gdr-on")
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    shutil.copy(log, a)
    shutil.copy(log, b)
    files = ingested([a, b])
    job = load_job(files)
    assert job.files == ("a.log",)
    assert [(x.file, x.reason) for x in job.left_out] == [("b.log", "the same content as a.log")]
    assert job.log.sources == ()


@pytest.mark.parametrize(("first", "second", "why"), [
    ("2x1-a100pcie-ib-gdr-on", "1x2-a100pcie-p2pipc", "another job: no communicator in common (commId"),
    ("ault-2x2-shm-socket", "snellius-1x4", "another job: NCCL 2.22.3, the job's is 2.17.1"),
    ("corigpu-2x8-v100", "perlmutter-2x4-roce-ibv", "another job: NCCL 2.7.8, the job's is 2.4.8"),
])
def test_logs_of_another_job_are_left_out_with_the_reason(tmp_path: Path, first: str, second: str, why: str) -> None:
    files = ingested([shutil.copy(_pick(first), tmp_path / "first.log"),
                      shutil.copy(_pick(second), tmp_path / "second.log")])
    job = load_job(files)
    assert job.files == ("first.log",)
    assert len(job.left_out) == 1 and job.left_out[0].file == "second.log"
    assert job.left_out[0].reason.startswith(why), job.left_out[0].reason
    results = analyze_logs(files, "all")
    assert results[1].info["nccl_left_out"] == job.left_out[0].reason and results[1].findings == []
    (warning,) = log_warnings(results)
    assert warning["code"] == "nccl_logs_left_out" and warning["reports"] == ["second.log"]
    assert "second.log: another job" in warning["message"]


def test_a_restarted_job_is_another_run(tmp_path: Path) -> None:
    """The same ranks on the same hosts with other pids (a restart): rank 0 is another process."""
    log = _pick("2x1-a100pcie-ib-gdr-on")
    text = log.read_text(errors="replace")
    pids = sorted({m.group(2) for line in text.splitlines() if (m := PREFIX.match(line))})
    restarted = text
    for pid in pids:
        restarted = restarted.replace(f":{pid}:", f":9{pid}:")
    a, b = tmp_path / "first.log", tmp_path / "restart.log"
    shutil.copy(log, a)
    # the second log keeps the communicator id of the first (the restarted job's rank 0 would print another;
    # kept here so only the processes differ)
    b.write_text(restarted)
    job = load_job(ingested([a, b]))
    assert [x.file for x in job.left_out] == ["restart.log"]
    assert re.fullmatch(r"another job: rank [01] is \S+:9\d+ there, \S+:\d+ in the job", job.left_out[0].reason)


def test_merged_warnings_stay_within_one_logs_caps_and_are_all_counted(tmp_path: Path) -> None:
    """Two ranks' files of 300 distinct WARN lines each (hostile): 50 kept per kind as in one log, 600 counted; a
    WARN line both files hold (a per-node and a per-rank file) counts once."""
    from analysis.readers.nccl.parsed import MAX_WARNINGS_PER_KIND

    paths = []
    for rank, pid in ((0, 11), (1, 12)):
        p = f"nodeA:{pid}:{pid} [{rank}] "
        lines = [f"{p}NCCL INFO comm 0x1 rank {rank} nranks 2 cudaDev {rank} busId {rank}000 commId 0xfeed - Init START"]
        lines += [f"{p}transport/net_ib.cc:{i} NCCL WARN NET/IB : Got completion with error 12, opcode 0, len {i}"
                  for i in range(300)]
        path = tmp_path / f"r{rank}.log"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    both = tmp_path / "node.log"  # the node's log: both ranks' lines again
    both.write_text(paths[0].read_text() + paths[1].read_text())
    job = load_job(ingested([*paths, both]))
    assert not job.left_out
    assert job.log.warning_counts == {"wc_error": 600}
    assert len([w for w in job.log.warnings if w.kind == "wc_error"]) == MAX_WARNINGS_PER_KIND


# -- the network path is its types (analysis.network_path), its JSON their to_json, checked by the result schema --
RECORDS = [cls for cls in vars(network_path).values() if isinstance(cls, type) and issubclass(cls, network_path._Record)
           and cls is not network_path._Record]
# The schema of a run's network path (generated from the types), to check a log's path JSON against.
RUN_PATH = jsonschema_rs.Draft202012Validator({"$ref": "#/$defs/RunNetworkPath", "$defs": result_schema()["$defs"]})


def test_each_record_s_json_is_its_fields_in_order() -> None:
    """A record's JSON names its fields in their order (``file``, where a merged log places the line, only when
    set), and reads back as the record."""
    assert len(RECORDS) == 18
    for cls in RECORDS:
        placed_in_file = [f.name for f in dataclasses.fields(cls) if f.metadata.get("json", {}).get("optional")]
        keys = [f.name for f in dataclasses.fields(cls) if f.name not in placed_in_file]
        record = cls(**{f.name: _sample(f.type) for f in dataclasses.fields(cls) if f.name in keys})
        assert list(record.to_json()) == keys, cls.__name__
        assert cls.from_json(record.to_json()) == record, cls.__name__
        if placed_in_file:
            assert placed_in_file == ["file"], cls.__name__
            placed = dataclasses.replace(record, file="rank3.log")
            assert list(placed.to_json()) == [*keys, "file"]
            assert cls.from_json(placed.to_json()) == placed


def _sample(annotation: str) -> object:
    """A value of a record field's type (its annotation as written): a tuple, a number, a flag or a string."""
    if annotation.startswith("tuple["):
        return ()
    if annotation.startswith(("int", "float")):
        return 1
    return True if annotation.startswith("bool") else "x"


def test_the_network_path_is_its_type_on_every_corpus_log_and_a_merged_job(tmp_path: Path) -> None:
    """Every corpus log's path (``NcclLog.path``) and a job merged from per-process files (every line placed in its
    file, the files listed) is the schema's ``RunNetworkPath`` once a report is named, and reads back from its JSON
    as the same path; a key the types lack fails the schema."""
    paths = []
    for i, log in enumerate(LOGS):
        db = tmp_path / f"{i}.duckdb"
        ingest(log, db)
        paths.append((log.name[:40], load(db).path().to_json()))
    split = tmp_path / "split"
    split.mkdir()
    files, job_out = split_per_process(SPLIT[0], split)
    merged = analyze_logs(ingested([*files, job_out]), "all")[0].info["network_path"]
    assert merged["files"] and any("file" in c for c in merged["connections"])
    for name, path in [*paths, ("merged", merged)]:
        assert [e.message for e in RUN_PATH.iter_errors({"report": name, **path})] == [], name
        assert network_path.NetworkPath.from_json(path).to_json() == path, name
    bad = {"report": "merged", **merged, "nics": [{**merged["nics"][0], "speed": 1}]}
    assert len(list(RUN_PATH.iter_errors(bad))) == 1
