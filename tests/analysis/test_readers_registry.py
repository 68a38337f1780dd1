"""The reader interface: one registry of input kinds that refuses a second reader for a kind, detects each
kind on real corpus files (every NCCL log, every nsys export and ncu CSV), and dispatches ingest by kind."""

from __future__ import annotations

import json

import duckdb
import pytest

from analysis.api import (
    AnalysisStep,
    ToolKind,
    TraceError,
    check_normalized_report,
    detect_kind,
    ingest,
    report_step,
)
from analysis.input_kinds import NsysReader, default_readers, reader_of
from analysis.readers import DuplicateReader, ReaderRegistry
from tests.conftest import NCU_FILES, NSYS_FILES, corpus_dir

NCCL_LOGS = sorted((corpus_dir() / "nccl").glob("*.log"))
AULT_LOG = next(p for p in NCCL_LOGS if "ault-2x2-shm-socket" in p.name)


def test_a_second_reader_for_a_kind_fails():
    registry = ReaderRegistry()
    registry.register(NsysReader())
    with pytest.raises(DuplicateReader, match="nsys"):
        registry.register(NsysReader())
    assert len(registry) == 1


def test_the_default_registry_lists_each_kind_once_in_detection_order():
    registry = default_readers()
    assert registry.kinds() == (ToolKind.NSYS, ToolKind.NCU, ToolKind.NCCL)
    assert [reader_of(k).kind for k in ("nsys", "ncu", "nccl")] == list(registry.kinds())
    # Which step analyses each kind: nsys on its own after ingest, the others inside the run step.
    assert [report_step(k) for k in registry.kinds()] == [AnalysisStep.REPORT, AnalysisStep.RUN, AnalysisStep.RUN]
    with pytest.raises(KeyError):
        reader_of("perfetto")


def test_the_kind_is_a_string_where_it_is_stored_and_shown():
    assert ToolKind.NCCL == "nccl" and f"{ToolKind.NSYS}" == "nsys"
    assert json.dumps({"tool": ToolKind.NCU}) == '{"tool": "ncu"}'


def test_every_corpus_file_is_detected_as_its_kind():
    assert len(NCCL_LOGS) == 16 and NSYS_FILES and NCU_FILES
    assert {detect_kind(p) for p in NCCL_LOGS} == {ToolKind.NCCL}
    assert {detect_kind(p) for p in NSYS_FILES} == {ToolKind.NSYS}
    assert {detect_kind(p) for p in NCU_FILES} == {ToolKind.NCU}


def test_a_log_behind_pages_of_program_output_is_still_a_log(tmp_path):
    # The head (4 KiB) holds none of NCCL's lines: the reader reads further (35 KB), as the ncu reader does.
    src = tmp_path / "job.out"
    src.write_bytes(b"epoch 0 loss 1.25 step time 0.4 s\n" * 1000 + AULT_LOG.read_bytes())
    assert detect_kind(src) == ToolKind.NCCL


def test_neither_kind_is_a_typed_error(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("nothing here but words\n" * 100)
    with pytest.raises(TraceError) as exc:
        detect_kind(text)
    assert exc.value.code == "unknown_format" and "NCCL" in exc.value.message
    binary = tmp_path / "blob.log"
    binary.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(TraceError) as exc:
        detect_kind(binary)
    assert exc.value.code == "not_sqlite"


def test_ingest_dispatches_by_kind_and_the_file_says_its_kind(tmp_path):
    out = tmp_path / "log.duckdb"
    result = ingest(AULT_LOG, out)
    assert result.tool == ToolKind.NCCL and result.kept is None
    # The headline facts equal the log's own lines: 2 nodes (ault43, ault44), 4 ranks.
    assert result.info["counts"]["nodes"] == 2 and result.info["counts"]["ranks"] == 4
    assert result.info["tool_version"] == "2.17.1"
    assert check_normalized_report(out) == ToolKind.NCCL
    con = duckdb.connect(str(out), read_only=True)
    try:
        assert dict(con.execute("SELECT key, value FROM meta").fetchall())["tool"] == "nccl"
    finally:
        con.close()


def test_a_stored_file_of_another_schema_version_is_refused(tmp_path):
    out = tmp_path / "log.duckdb"
    ingest(AULT_LOG, out, summarize=False)
    con = duckdb.connect(str(out))
    try:
        con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    finally:
        con.close()
    with pytest.raises(TraceError) as exc:
        check_normalized_report(out)
    assert exc.value.code == "unsupported_schema"
