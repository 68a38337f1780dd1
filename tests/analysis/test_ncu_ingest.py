"""Ingest of Nsight Compute CSV exports: every corpus file, values checked against the raw CSV text."""

from __future__ import annotations

import duckdb
import pytest

from analysis.api import detect_kind, ingest
from analysis.diagnosis.summary import report_info
from analysis.errors import TraceError
from analysis.model.trace import Trace
from analysis.readers.ncu.ingest import ingest_ncu
from tests.analysis.ncu_builders import long_csv, raw_csv, read_corpus_csv, write
from tests.conftest import NCU_FILES

# Independent of analysis.readers.ncu.units: the factor from each unit the corpus uses to its base unit.
CORPUS_UNITS = {"": ("", 1.0), "%": ("%", 1.0), "byte": ("B", 1.0), "nsecond": ("ns", 1.0), "ns": ("ns", 1.0),
                "hz": ("Hz", 1.0), "cycle": ("cycle", 1.0), "cycle/second": ("cycle/s", 1.0), "inst": ("inst", 1.0),
                "byte/s": ("B/s", 1.0), "inst/cycle": ("inst/cycle", 1.0), "warp": ("warp", 1.0),
                "block": ("block", 1.0), "sample": ("sample", 1.0), "SM": ("SM", 1.0), "thread": ("thread", 1.0),
                "register/thread": ("register/thread", 1.0), "byte/block": ("B/block", 1.0)}


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    out = {}
    for path in NCU_FILES:
        dest = tmp_path_factory.mktemp("ncu") / "r.duckdb"
        ingest_ncu(path, dest)
        out[path] = dest
    return out


def test_corpus_has_ncu_files():
    assert len(NCU_FILES) == 5


@pytest.mark.parametrize("path", NCU_FILES, ids=lambda p: p.name.split("__")[-1])
def test_corpus_file_matches_raw_csv(path, ingested):
    raw = read_corpus_csv(path)
    con = duckdb.connect(str(ingested[path]), read_only=True)
    metric_rows = [r for r in raw.rows if r["Metric Name"]]
    rule_rows = [r for r in raw.rows if not r["Metric Name"] and r.get("Rule Name")]
    assert con.execute("SELECT count(*) FROM ncu_metrics").fetchone()[0] == len(metric_rows)
    assert con.execute("SELECT count(*) FROM ncu_rule_results").fetchone()[0] == len(rule_rows)
    ids = sorted({int(r["ID"]) for r in raw.rows})
    assert [r[0] for r in con.execute("SELECT kernel_id FROM ncu_kernels ORDER BY 1").fetchall()] == ids
    stored = con.execute("SELECT kernel_id, section, metric, unit, value, text, orig_unit FROM ncu_metrics "
                         "ORDER BY rowid").fetchall()
    for row, (kid, section, metric, unit, value, text, orig_unit) in zip(metric_rows, stored, strict=True):
        assert (kid, section, metric, text, orig_unit) == (int(row["ID"]), row["Section Name"], row["Metric Name"],
                                                           row["Metric Value"], row["Metric Unit"])
        base, factor = CORPUS_UNITS[row["Metric Unit"]]
        expected = _number(row["Metric Value"])
        assert unit == base
        assert value == (None if expected is None else pytest.approx(expected * factor, rel=1e-12))
    for row, got in zip(rule_rows, con.execute(
            "SELECT kernel_id, section, rule, type, message, speedup_type, speedup_pct FROM ncu_rule_results "
            "ORDER BY rowid").fetchall(), strict=True):
        speedup = _number(row.get("Estimated Speedup", ""))
        assert got == (int(row["ID"]), row["Section Name"], row["Rule Name"], row["Rule Type"],
                       row["Rule Description"], row.get("Estimated Speedup Type") or None, speedup)
    for kid, name, pid, host, duration in con.execute(
            "SELECT kernel_id, name, pid, host, duration_ns FROM ncu_kernels").fetchall():
        first = next(r for r in raw.rows if int(r["ID"]) == kid)
        assert (name, pid, host) == (first["Kernel Name"], int(first["Process ID"]), first["Host Name"])
        durations = [_number(r["Metric Value"]) for r in raw.rows if int(r["ID"]) == kid
                     and r["Metric Name"] in ("gpu__time_duration.sum", "Duration")]
        assert duration == (durations[0] if durations else None)
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert meta["tool"] == "ncu" and meta["schema_version"] and "tool_version" not in meta
    con.close()


def test_corpus_report_info(ingested):
    path = next(p for p in NCU_FILES if p.name.endswith("pytorch-dropout-dram.csv"))
    raw = read_corpus_csv(path)
    trace = Trace(ingested[path], path.name)
    info = report_info(trace)
    trace.close()
    durations = [_number(r["Metric Value"]) for r in raw.rows if r["Metric Name"] == "gpu__time_duration.sum"]
    assert info["tool"] == "ncu" and info["tool_version"] is None and info["file"] == path.name
    assert info["counts"]["kernels"] == len({r["ID"] for r in raw.rows}) == 162
    assert info["counts"]["metrics"] == len(raw.rows)
    assert info["gpu_time_ns"] == int(sum(durations))
    assert info["pids"] == [33512] and info["host"] == "127.0.0.1" and info["span_ns"] is None
    assert info["rank"] is None and info["world_size"] is None


@pytest.mark.parametrize("path", NCU_FILES, ids=lambda p: p.name.split("__")[-1])
def test_detect_kind_by_content(path, tmp_path):
    renamed = tmp_path / "upload.bin"  # content decides, not the name
    renamed.write_bytes(path.read_bytes())
    assert detect_kind(renamed) == "ncu"


def test_api_ingest_returns_ncu_info(tmp_path):
    path = NCU_FILES[0]
    result = ingest(path, tmp_path / "r.duckdb")
    assert result.tool == "ncu" and result.info["counts"]["kernels"] == 1


def test_ncu_rep_without_ncu_is_a_typed_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu binary anywhere
    rep = write(tmp_path, b"NVR\x00" + bytes(range(256)) * 4, "profile.bin")
    with pytest.raises(TraceError) as exc:
        detect_kind(rep)
    assert exc.value.code == "ncu_rep_needs_ncu" and "ncu --import" in exc.value.message
    with pytest.raises(TraceError) as exc:
        ingest_ncu(rep, tmp_path / "out.duckdb")
    assert exc.value.code == "ncu_rep_needs_ncu"
    assert not list(tmp_path.glob("*.duckdb*")) and not list(tmp_path.glob(".out*"))


def test_ncu_rep_is_converted_with_ncu_on_path(tmp_path, monkeypatch):
    # A stand-in `ncu` (a shell script) proves the conversion path: argument list, stdout captured as CSV.
    csv_file = write(tmp_path, long_csv([("GPU Speed Of Light Throughput", "Duration", "usecond", "2.5")]), "real.csv")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ncu"
    fake.write_text(f'#!/bin/sh\n[ "$1" = --import ] && [ "$4" = --page ] && [ "$5" = raw ] && cat "{csv_file}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    rep = write(tmp_path, b"NVR\x00binary", "p.ncu-rep")
    assert detect_kind(rep) == "ncu"
    stats = ingest_ncu(rep, tmp_path / "out.duckdb")
    con = duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True)
    assert stats["kernels"] == 1
    assert con.execute("SELECT duration_ns FROM ncu_kernels").fetchone()[0] == 2500.0
    con.close()


def test_garbage_is_not_ncu_and_leaves_nothing(tmp_path):
    bad = write(tmp_path, b"==PROF== Connected to process 1\nhello\nno header here\n")
    with pytest.raises(TraceError) as exc:
        ingest_ncu(bad, tmp_path / "out.duckdb")
    assert exc.value.code == "not_ncu_csv" and exc.value.details["line"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.csv"]


def test_raw_page_layout_with_units_row(tmp_path):
    data = raw_csv(
        [{"ID": "0", "Kernel Name": "k0(int)", "Block Size": "(128, 2, 1)", "Grid Size": "(40, 1, 1)",
          "gpu__time_duration.sum": "1.50", "dram__bytes.sum": "2.5", "launch__registers_per_thread": "n/a",
          "sm__cycles_elapsed.avg.per_second": "1.41"},
         {"ID": "1", "Kernel Name": "k1(int)", "gpu__time_duration.sum": "2,000.25", "dram__bytes.sum": "7",
          "launch__registers_per_thread": "64", "sm__cycles_elapsed.avg.per_second": "1"}],
        {"gpu__time_duration.sum": "usecond", "dram__bytes.sum": "Mbyte", "launch__registers_per_thread":
         "register/thread", "sm__cycles_elapsed.avg.per_second": "cycle/nsecond"})
    stats = ingest_ncu(write(tmp_path, data), tmp_path / "out.duckdb")
    assert stats["layout"] == "raw" and stats["kernels"] == 2 and stats["metrics"] == 8
    con = duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True)
    assert con.execute("SELECT kernel_id, block_x, block_y, grid_x, block_size, grid_size, duration_ns, registers "
                       "FROM ncu_kernels ORDER BY 1").fetchall() == [
        (0, 128, 2, 40, 256, 40, 1500.0, None), (1, 256, 1, 1024, 256, 1024, 2000250.0, 64)]
    rows = con.execute("SELECT kernel_id, metric, unit, value, text, orig_unit FROM ncu_metrics "
                       "WHERE metric IN ('dram__bytes.sum', 'launch__registers_per_thread', "
                       "'sm__cycles_elapsed.avg.per_second') ORDER BY 1, 2").fetchall()
    assert rows == [(0, "dram__bytes.sum", "B", 2.5e6, "2.5", "Mbyte"),
                    (0, "launch__registers_per_thread", "register/thread", None, "n/a", "register/thread"),
                    (0, "sm__cycles_elapsed.avg.per_second", "cycle/s", 1.41e9, "1.41", "cycle/nsecond"),
                    (1, "dram__bytes.sum", "B", 7e6, "7", "Mbyte"),
                    (1, "launch__registers_per_thread", "register/thread", 64.0, "64", "register/thread"),
                    (1, "sm__cycles_elapsed.avg.per_second", "cycle/s", 1e9, "1", "cycle/nsecond")]
    con.close()


def test_untrusted_text_is_data(tmp_path):
    evil = '=HYPERLINK("http://x","y")\x07\x1b[31m<script>&"'
    data = long_csv([("Launch Statistics", "Function Cache Configuration", "", "=cmd|' /C calc'!A0")],
                    kernels=[{"Kernel Name": evil}], newline="\r\n")
    ingest_ncu(write(tmp_path, b"\xef\xbb\xbf" + data), tmp_path / "out.duckdb")
    con = duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True)
    assert con.execute("SELECT name FROM ncu_kernels").fetchone()[0] == evil
    assert con.execute("SELECT text, value FROM ncu_metrics").fetchone() == ("=cmd|' /C calc'!A0", None)
    con.close()


def test_preamble_of_program_output_is_skipped(tmp_path):
    preamble = "".join(f"==PROF== line {i}, with \"quotes\", commas\n" for i in range(204))
    body = long_csv([("GPU Speed Of Light Throughput", "Duration", "msecond", "1.25")], keep_preamble=False)
    path = write(tmp_path, preamble.encode() + body)
    assert detect_kind(path) == "ncu"
    ingest_ncu(path, tmp_path / "out.duckdb")
    con = duckdb.connect(str(tmp_path / "out.duckdb"), read_only=True)
    assert con.execute("SELECT duration_ns FROM ncu_kernels").fetchone()[0] == 1.25e6
    con.close()


def test_long_program_output_before_ncu_lines_is_still_detected(tmp_path):
    chatter = "".join(f"epoch {i}: loss=0.{i:04d}\n" for i in range(2000)).encode()  # ~50 kB, no ==PROF==
    body = long_csv([("GPU Speed Of Light Throughput", "Duration", "nsecond", "1,000")], keep_preamble=False)
    path = write(tmp_path, chatter + body)
    assert detect_kind(path) == "ncu"
    ingest_ncu(path, tmp_path / "out.duckdb")


def test_timeout_is_typed_and_leaves_nothing(tmp_path):
    from analysis.api import Limits

    path = write(tmp_path, long_csv([("GPU Speed Of Light Throughput", "Duration", "nsecond", "1")]))
    with pytest.raises(TraceError) as exc:
        ingest_ncu(path, tmp_path / "out.duckdb", limits=Limits(timeout_s=-1))
    assert exc.value.code == "timeout"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.csv"]


def test_progress_reaches_the_file_size(tmp_path):
    path = write(tmp_path, long_csv([("GPU Speed Of Light Throughput", "Duration", "nsecond", "1")]))
    seen = []
    ingest_ncu(path, tmp_path / "out.duckdb", progress=lambda stage, done, total: seen.append((stage, done, total)))
    size = path.stat().st_size
    assert seen and seen[-1] == ("ncu_metrics", size, size)


def test_report_info_top_kernels_match_raw_durations(ingested):
    path = next(p for p in NCU_FILES if p.name.endswith("pytorch-sgemm-small.csv"))
    raw = read_corpus_csv(path)
    trace = Trace(ingested[path], path.name)
    top = report_info(trace)["top_kernels"]
    trace.close()
    expected = sorted(((r["Kernel Name"], int(_number(r["Metric Value"]))) for r in raw.rows
                       if r["Metric Name"] == "gpu__time_duration.sum"), key=lambda kv: -kv[1])
    assert [(t["name"], t["total_ns"], t["count"]) for t in top] == [(n, d, 1) for n, d in expected]
