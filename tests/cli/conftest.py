"""CLI fixtures: the app's (a migrated metadata DB, a real Redis broker) for comparing `goodput diff` with the
service's compare on the same reports."""

from tests.app.conftest import app, auth, backend, broker, client, db, migrated, session, settings  # noqa: F401
from tests.e2e.conftest import make_service, redis_server  # noqa: F401
from tests.workers.conftest import db_factories  # noqa: F401
