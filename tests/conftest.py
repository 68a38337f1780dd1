"""Shared fixtures: where the real corpus lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config) -> None:
    # In CI every property test draws the same examples (derandomized: a red run reproduces on a laptop with
    # CI=true, and print_blob prints the failing example's reproduction blob); on a laptop they keep drawing new
    # ones, which is how they find new bugs. Set HYPOTHESIS_PROFILE to pick one explicitly.
    # No deadline in either: Hypothesis' default fails an example that takes over 200 ms, a wall-clock limit that a
    # busy 2-core machine breaks at random (the time a test may take is pytest-timeout's business).
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("dev", print_blob=True, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


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


def redis_db() -> int:
    """The Redis database number of this test process: one per xdist worker (8-15), so the queue lengths a
    test reads are its own while another worker enqueues."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:] or 0)
    if index >= 8:
        raise RuntimeError(f"{worker}: at most 8 xdist workers share the test Redis (databases 8-15)")
    return 8 + index


def pytest_collection_modifyitems(config, items) -> None:
    # The browser tests share one `goodput serve` (a session fixture) and run in file order: under xdist
    # (make test: --dist loadgroup) they stay together on one worker instead of starting a service per worker.
    browser = ROOT / "tests" / "browser"
    for item in items:
        if browser in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("browser"))
