"""The ingest's space check walks the export's tables (SQLite's dbstat) only when the file's size does not fit."""

from __future__ import annotations

from collections import namedtuple

import pytest

from analysis.errors import TraceError
from analysis.readers.nsys import guard
from analysis.readers.nsys import ingest as nsys_ingest
from analysis.readers.nsys.guard import validate
from tests.conftest import corpus_file

_Usage = namedtuple("_Usage", "total used free")


def _free(monkeypatch, free: int) -> None:
    monkeypatch.setattr(nsys_ingest.shutil, "disk_usage", lambda path: _Usage(2**40, 2**40 - free, free))


def test_the_tables_are_measured_only_when_the_file_does_not_fit(tmp_path, monkeypatch):
    src = corpus_file("vecadd-2026.sqlite")
    walks: list[list[str]] = []
    real = guard._table_bytes
    monkeypatch.setattr(guard, "_table_bytes", lambda con, names: walks.append(names) or real(con, names))
    info = validate(src, max_bytes=2**40, timeout_s=60)
    assert info.table_bytes is None and not walks  # validation does not walk the tables
    _free(monkeypatch, 2**40)
    nsys_ingest._check_space(info, tmp_path, keep=False)
    assert info.table_bytes is None and not walks  # plenty of room for the whole file: nothing measured

    bound = nsys_ingest.space_needed(info, keep=False, table_bytes=info.size)
    need = nsys_ingest.space_needed(info, keep=False)  # measures, once
    assert len(walks) == 1 and 0 < info.table_bytes < info.size and need < bound
    assert nsys_ingest.space_needed(info, keep=False) == need and len(walks) == 1

    info = validate(src, max_bytes=2**40, timeout_s=60)
    _free(monkeypatch, need)  # too little for the file's size, enough for the tables read
    nsys_ingest._check_space(info, tmp_path, keep=False)
    assert len(walks) == 2 and info.table_bytes is not None
    _free(monkeypatch, need - 1)
    with pytest.raises(TraceError) as err:
        nsys_ingest._check_space(info, tmp_path, keep=False)
    assert err.value.code == "no_space" and f"{need:,}" in err.value.message
