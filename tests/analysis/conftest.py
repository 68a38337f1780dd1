"""Analysis tests: ingested exports are cached per session under pytest's tmp dir (see planting.ingested)."""

from __future__ import annotations

import pytest

from tests.analysis import planting


@pytest.fixture(scope="session", autouse=True)
def _ingest_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # One directory per test process: each pytest-xdist worker has its own base temp dir.
    planting.use_cache_dir(tmp_path_factory.mktemp("ingested"))
