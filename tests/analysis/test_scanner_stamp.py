"""The ingest child checks the sqlite_scanner's signature once per binary (``child.scanner_verified``): a later
child loads the same, unchanged file without DuckDB's 0.1 s check, and anything else is checked again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from analysis.readers.nsys import child


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "goodput" / child.STAMP_NAME


@pytest.fixture
def scanner(tmp_path: Path) -> Path:
    """A copy of the installed, signed scanner (its own inode: the tests may change it)."""
    out = tmp_path / "ext" / "sqlite_scanner.duckdb_extension"
    out.parent.mkdir()
    shutil.copyfile(child.extension_path(duckdb.__version__), out)
    return out


def _load(ext: Path) -> None:
    verified = child.scanner_verified(ext)
    con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": True} if verified is not None else {})
    try:
        child.load_scanner(con, ext, verified)
        assert con.execute("SELECT count(*) FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner' "
                           "AND loaded").fetchone() == (1,)
    finally:
        con.close()


def test_a_checked_load_records_the_binary_and_the_next_one_trusts_it(cache: Path, scanner: Path) -> None:
    assert child.scanner_verified(scanner) is None
    _load(scanner)
    assert cache.is_file() and cache.stat().st_mode & 0o777 == 0o600
    assert json.loads(cache.read_text())["ino"] == scanner.stat().st_ino
    assert child.scanner_verified(scanner) is not None
    _load(scanner)


def test_a_changed_binary_is_checked_again_and_refused_when_unsigned(cache: Path, scanner: Path) -> None:
    _load(scanner)
    assert child.scanner_verified(scanner) is not None
    mid = scanner.stat().st_size // 2
    with scanner.open("r+b") as fh:  # one byte flipped: same size, same inode, only the change time tells
        fh.seek(mid)
        byte = fh.read(1)[0]
        fh.seek(mid)
        fh.write(bytes([byte ^ 0xFF]))
    assert child.scanner_verified(scanner) is None
    con = duckdb.connect(":memory:")
    try:
        with pytest.raises(duckdb.Error, match="(?i)signature"):
            child.load_scanner(con, scanner, None)
    finally:
        con.close()
    assert child.scanner_verified(scanner) is None  # a failed load records nothing


def test_a_stamp_others_could_write_is_ignored(cache: Path, scanner: Path) -> None:
    _load(scanner)
    os.chmod(cache, 0o622)
    assert child.scanner_verified(scanner) is None
    os.chmod(cache, 0o600)
    assert child.scanner_verified(scanner) is not None
    cache.write_text("{not json")
    assert child.scanner_verified(scanner) is None


def test_a_binary_replaced_during_its_trusted_load_stops_the_child(cache: Path, scanner: Path) -> None:
    _load(scanner)
    verified = child.scanner_verified(scanner)
    assert verified is not None
    con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": True})
    try:
        with pytest.raises(RuntimeError, match="changed"):
            child.load_scanner(con, scanner, {**verified, "ctime_ns": verified["ctime_ns"] - 1})
    finally:
        con.close()
