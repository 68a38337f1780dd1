"""Where `goodput analyze` keeps its temporary DuckDB copies (``goodput_cli.inputs.scratch_dir``): in memory (a
tmpfs) for small exports when there is room and TMPDIR names no folder, else where ``tempfile`` puts them; the
command's output is the same either way and nothing is left behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from goodput_cli import inputs
from goodput_cli.main import main
from tests.conftest import corpus_file

EXPORT = corpus_file("vecadd-2026.sqlite")


@pytest.fixture
def shm(tmp_path, monkeypatch) -> Path:
    """A stand-in for the tmpfs: a folder of this test, with the room the real one would have."""
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(inputs, "SCRATCH", folder)
    monkeypatch.delenv("TMPDIR", raising=False)
    return folder


def test_a_small_export_goes_to_the_scratch_folder(shm):
    assert inputs.scratch_dir(["--format", "json", str(EXPORT)]) == str(shm)


def test_tmpdir_is_the_callers_choice(shm, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert inputs.scratch_dir([str(EXPORT)]) is None


def test_exports_over_the_limit_stay_on_disk(shm, monkeypatch):
    monkeypatch.setattr(inputs, "SCRATCH_MAX_BYTES", EXPORT.stat().st_size - 1)
    assert inputs.scratch_dir([str(EXPORT)]) is None


def test_no_room_no_scratch(shm, monkeypatch):
    free = os.statvfs(shm)
    monkeypatch.setattr(inputs, "SCRATCH_SPARE_BYTES", free.f_bavail * free.f_frsize + 1)
    assert inputs.scratch_dir([str(EXPORT)]) is None


def test_no_scratch_folder(shm, monkeypatch, tmp_path):
    monkeypatch.setattr(inputs, "SCRATCH", tmp_path / "missing")
    assert inputs.scratch_dir([str(EXPORT)]) is None


def test_the_same_json_in_memory_and_on_disk(shm, monkeypatch, tmp_path, capsys):
    """The command's JSON does not depend on where its copy was written, and neither folder keeps anything."""
    chosen: list[str | None] = []
    original = inputs.scratch_dir
    monkeypatch.setattr(inputs, "scratch_dir", lambda args: chosen.append(original(args)) or chosen[-1])
    assert main(["analyze", "--format", "json", "--quiet", str(EXPORT)]) == 0
    in_memory = capsys.readouterr().out
    assert chosen == [str(shm)]
    assert list(shm.iterdir()) == []
    disk = tmp_path / "disk"
    disk.mkdir()
    monkeypatch.setenv("TMPDIR", str(disk))
    monkeypatch.setattr(tempfile, "tempdir", str(disk))  # read once by tempfile: TMPDIR as a new process sees it
    assert main(["analyze", "--format", "json", "--quiet", str(EXPORT)]) == 0
    assert chosen == [str(shm), None]
    assert capsys.readouterr().out == in_memory
    assert list(disk.iterdir()) == []
