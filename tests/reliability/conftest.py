"""The standing reliability suite runs on the end-to-end fixtures: a private Redis, migrated databases on
SQLite and PostgreSQL, real worker and beat processes."""

from __future__ import annotations

from tests.e2e.conftest import make_service, redis_server  # noqa: F401 (shared fixtures)
from tests.workers.conftest import db_factories  # noqa: F401 (shared session fixture)
