"""End-to-end fixtures: a private Redis, a migrated metadata DB (SQLite or PostgreSQL), real processes."""

from __future__ import annotations

import pytest

from tests.e2e.services import RedisServer, Service, e2e_settings
from tests.workers.conftest import db_factories  # noqa: F401 (shared session fixture)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_service(tmp_path, redis_server, db_factories):  # noqa: F811
    """Build a Service on ``backend`` (sqlite|postgresql); started parts are stopped after the test."""
    made: list[Service] = []

    def make(backend: str = "sqlite", **overrides) -> Service:
        data = tmp_path / "data"
        data.mkdir(exist_ok=True)
        settings = e2e_settings(data, db_factories(backend).new(), redis_server.url, **overrides)
        service = Service(settings, tmp_path)
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()
