"""Untrusted inputs built from corpus files at test time: each fails with its code, leaving nothing behind."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.api import Limits, ingest
from analysis.diagnosis.summary import report_info
from analysis.errors import TraceError
from analysis.model.trace import Trace
from tests.conftest import corpus_file

BASE = "vecadd-2026.sqlite"  # small (0.6 MB), newest schema


def _copy(tmp_path: Path, name: str = "variant.sqlite") -> Path:
    dst = tmp_path / name
    shutil.copyfile(corpus_file(BASE), dst)
    os.chmod(dst, 0o644)
    return dst


def _edit(path: Path, *statements: tuple) -> Path:
    con = sqlite3.connect(path)
    for stmt in statements:
        con.execute(*stmt)
    con.commit()
    con.close()
    return path


def _expect(src: Path, tmp_path: Path, code: str, limits: Limits | None = None) -> TraceError:
    out = tmp_path / "out" / "report.duckdb"
    out.parent.mkdir(exist_ok=True)
    with pytest.raises(TraceError) as info:
        ingest(src, out, limits=limits or Limits(timeout_s=60))
    assert info.value.code == code, info.value.message
    assert "\n" not in info.value.message and info.value.message
    # Nothing published and no temporary file, WAL or spill directory left beside it.
    assert list(out.parent.iterdir()) == []
    return info.value


def _string_pages(path: Path) -> list[int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = 'StringIds' AND pagetype = 'leaf'")]
    finally:
        con.close()


def test_empty_file(tmp_path):
    src = tmp_path / "empty.sqlite"
    src.write_bytes(b"")
    _expect(src, tmp_path, "empty_file")


def test_random_bytes(tmp_path):
    src = tmp_path / "random.sqlite"
    src.write_bytes(random.Random(7).randbytes(200_000))
    _expect(src, tmp_path, "not_sqlite")


def test_png_renamed_sqlite(tmp_path):
    src = tmp_path / "picture.sqlite"
    # A real PNG signature and IHDR chunk followed by image-like bytes.
    src.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"
                    + random.Random(3).randbytes(4000))
    _expect(src, tmp_path, "not_sqlite")


def test_export_truncated_at_half(tmp_path):
    data = corpus_file(BASE).read_bytes()
    src = tmp_path / "truncated.sqlite"
    src.write_bytes(data[: len(data) // 2])
    _expect(src, tmp_path, "corrupt")


def test_bytes_overwritten_inside_string_pages(tmp_path):
    src = _copy(tmp_path)
    pages = _string_pages(src)
    assert len(pages) > 3
    page_size = 4096
    with src.open("r+b") as fh:
        for page in pages[1:3]:
            fh.seek((page - 1) * page_size)
            fh.write(b"\xab" * 64)  # b-tree page header and cell pointers
    _expect(src, tmp_path, "corrupt")


def test_valid_sqlite_without_nsys_tables(tmp_path):
    src = tmp_path / "other.sqlite"
    con = sqlite3.connect(src)
    con.execute("CREATE TABLE measurements (t INTEGER, value REAL)")
    con.execute("INSERT INTO measurements VALUES (1, 2.5)")
    con.commit()
    con.close()
    _expect(src, tmp_path, "not_nsys_export")


def test_string_table_replaced_by_a_view(tmp_path):
    src = _edit(_copy(tmp_path), ("ALTER TABLE StringIds RENAME TO StringIds_real",),
                ("CREATE VIEW StringIds AS SELECT id, value || '!' AS value FROM StringIds_real",))
    err = _expect(src, tmp_path, "unsafe_schema")
    assert "StringIds" in err.message and "view" in err.message


def test_view_spelled_in_another_case(tmp_path):
    # SQLite names are case-insensitive: a view 'STRINGIDS' answers queries for StringIds.
    src = _edit(_copy(tmp_path), ("ALTER TABLE StringIds RENAME TO s",),
                ("CREATE VIEW STRINGIDS AS SELECT id, value FROM s",))
    _expect(src, tmp_path, "unsafe_schema")


def test_trigger_on_a_table_we_read(tmp_path):
    src = _edit(_copy(tmp_path), ("CREATE TRIGGER t AFTER INSERT ON StringIds BEGIN DELETE FROM StringIds; END",))
    _expect(src, tmp_path, "unsafe_schema")


def test_generated_column_in_a_table_we_read(tmp_path):
    src = _edit(_copy(tmp_path), ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN x INTEGER "
                                  "GENERATED ALWAYS AS (start * 2) VIRTUAL",))
    _expect(src, tmp_path, "unsafe_schema")


def test_missing_core_column_names_the_version(tmp_path):
    # A column that only refines the answer degrades the report instead (tests/analysis/test_degraded_ingest.py).
    src = _edit(_copy(tmp_path), ('ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN "end"',))
    err = _expect(src, tmp_path, "unsupported_schema")
    assert "2026.1.1.204" in err.message and "end" in err.message


def test_value_of_the_wrong_type_inside_a_table(tmp_path):
    src = _edit(_copy(tmp_path), ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 1",))
    err = _expect(src, tmp_path, "corrupt")
    assert "start" in err.message


def test_file_over_the_size_limit(tmp_path):
    _expect(_copy(tmp_path), tmp_path, "too_large", Limits(max_bytes=100_000))


def test_validation_over_the_time_limit(tmp_path):
    _expect(_copy(tmp_path), tmp_path, "timeout", Limits(timeout_s=1e-6))


def test_child_over_its_memory_cap_is_too_large(tmp_path, monkeypatch):
    # A budget far below what DuckDB needs: the child dies, the parent reports it cleanly.
    from analysis.readers.nsys import spawn

    monkeypatch.setattr(spawn, "ADDRESS_SLACK_BYTES", 0)
    err = _expect(_copy(tmp_path), tmp_path, "too_large", Limits(memory_bytes=64 * 2**20))
    assert "memory" in err.message


def test_long_hostile_kernel_name_is_preserved_exactly(tmp_path):
    name = ("void k<" + "<script>alert('x')</script>&amp;\"\u2028" * 4000)[:100_000]
    assert len(name) == 100_000
    src = _edit(_copy(tmp_path), ("UPDATE StringIds SET value = ? WHERE id = "
                                  "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)", (name,)))
    out = tmp_path / "long.duckdb"
    ingest(src, out)
    trace = Trace(out, src.name)
    stored = trace.sql("SELECT DISTINCT name FROM kernels WHERE length(name) = 100000")
    assert stored == [(name,)]
    assert name in [k["name"] for k in report_info(trace)["top_kernels"]]
    trace.close()


def test_out_of_disk_space_is_reported_before_copying(tmp_path, monkeypatch):
    from analysis.readers.nsys import ingest as nsys_ingest

    real = shutil.disk_usage
    monkeypatch.setattr(nsys_ingest.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=1024))
    _expect(_copy(tmp_path), tmp_path, "no_space")


def test_copy_over_the_time_limit_kills_the_child(tmp_path):
    # Validation of this small file takes milliseconds; starting the child alone takes longer than this.
    err = _expect(_copy(tmp_path), tmp_path, "timeout", Limits(timeout_s=0.15))
    assert "limit" in err.message
