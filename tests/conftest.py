"""Shared fixtures: where the real corpus lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def corpus_dir() -> Path:
    """../shared/corpus beside the checkout (CI lays it there), or GOODPUT_CORPUS."""
    env = os.environ.get("GOODPUT_CORPUS")
    return Path(env) if env else ROOT.parent / "shared" / "corpus"


NSYS_FILES = sorted((corpus_dir() / "nsys").glob("*.sqlite"))
NCU_FILES = sorted((corpus_dir() / "ncu").glob("*.csv"))


def corpus_file(short: str) -> Path:
    """A corpus export by the short name after the last `__` (e.g. 'vecadd-2026.sqlite')."""
    for path in [*NSYS_FILES, *NCU_FILES]:
        if path.name.split("__")[-1] == short or path.name == short:
            return path
    raise FileNotFoundError(short)


@pytest.fixture(scope="session")
def corpus() -> Path:
    path = corpus_dir()
    assert (path / "nsys").is_dir(), f"corpus not found at {path}; set GOODPUT_CORPUS"
    return path
