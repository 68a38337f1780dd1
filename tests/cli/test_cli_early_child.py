"""`goodput analyze`'s ingest child started before the arguments are parsed (``goodput_cli.inputs.start_early``):
taken over when the first FILE is an SQLite export, discarded otherwise (a bad argument, `--help`, a first FILE
of another kind), never left running and never leaving its temporary folder behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from goodput_cli import inputs
from goodput_cli.main import main
from tests.conftest import corpus_file

EXPORT = str(corpus_file("vecadd-2026.sqlite"))
NCU = str(corpus_file("pytorch-sgemm-small.csv"))


@pytest.fixture
def started(monkeypatch) -> list[inputs.Early]:
    """Every Early that ``start_early`` made during the test."""
    seen: list[inputs.Early] = []
    original = inputs.start_early

    def recording(argv: list[str]) -> None:
        original(argv)
        if inputs._early is not None:
            seen.append(inputs._early)

    monkeypatch.setattr(inputs, "start_early", recording)
    return seen


def _gone(early: inputs.Early) -> None:
    assert not Path(early.tmp.name).exists()
    assert early.children == {}


def test_a_bad_argument_discards_the_early_child(started, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--no-such-option", EXPORT])
    assert exc.value.code == 2
    assert len(started) == 1 and inputs._early is None
    _gone(started[0])


def test_help_discards_the_early_child(started, capsys):
    with pytest.raises(SystemExit):
        main(["analyze", EXPORT, "--help"])
    assert len(started) == 1 and inputs._early is None
    _gone(started[0])


def test_a_first_file_of_another_kind_discards_it_and_the_export_is_still_analyzed(started, capsys, monkeypatch):
    killed: list[subprocess.Popen] = []
    original = inputs.discard

    def recording(children: dict) -> None:
        killed.extend(c.proc for c in children.values())
        original(children)

    monkeypatch.setattr(inputs, "discard", recording)
    assert main(["analyze", "--format", "json", "--quiet", NCU, EXPORT]) == 0
    assert '"reports"' in capsys.readouterr().out
    assert len(started) == 1 and inputs._early is None
    _gone(started[0])
    assert killed and all(p.returncode is not None for p in killed)  # the early child was discarded, not used


def test_no_export_among_the_arguments_starts_nothing(started, capsys):
    assert main(["analyze", "--format", "json", "--quiet", NCU]) == 0
    assert started == []
