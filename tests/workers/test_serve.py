"""`goodput serve` building blocks: the first-start admin token and the process supervisor."""

from __future__ import annotations

import signal
import sys
import threading
import time

from goodput_cli.service import ensure_admin_token, supervise
from tests.dbs import DatabaseFactory


def test_admin_token_is_created_once(tmp_path):
    from dataclasses import replace

    import sqlalchemy as sa

    from app.db import engine_for
    from app.models import ApiToken
    from app.services.tokens import hash_token
    from app.settings import Settings

    url = DatabaseFactory("sqlite", tmp_path).new()
    settings = replace(Settings(), data_dir=tmp_path, database_url=url)
    token = ensure_admin_token(settings)
    assert token and ensure_admin_token(settings) is None
    engine = engine_for(settings)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ApiToken.scope, ApiToken.token_hash)).all()
    engine.dispose()
    assert rows == [("admin", hash_token(token))]  # only the hash is stored


def _sleeper(seconds: float) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds})"]


def test_supervisor_stops_everyone_when_a_child_dies():
    started = time.monotonic()
    rc = supervise([("web", _sleeper(60)), ("worker", [sys.executable, "-c", "raise SystemExit(3)"])])
    assert rc == 1
    assert time.monotonic() - started < 30  # the sleeping sibling was stopped, not waited for


def test_supervisor_stops_cleanly_on_sigterm():
    timer = threading.Timer(1.0, lambda: signal.raise_signal(signal.SIGTERM))
    timer.start()
    started = time.monotonic()
    rc = supervise([("web", _sleeper(60)), ("beat", _sleeper(60))])
    timer.join()
    assert rc == 0 and time.monotonic() - started < 30
