"""`goodput serve` building blocks: the first-start admin token and the process supervisor."""

from __future__ import annotations

import re
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
    from app.services.accounts.tokens import hash_token
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


def test_supervisor_restarts_a_dying_child_with_backoff_and_leaves_the_others(tmp_path, capfd):
    starts = tmp_path / "starts"
    sibling = tmp_path / "sibling"
    # The "worker" records each start and dies at once; the "web" records its pid once and sleeps.
    dying = [sys.executable, "-c", f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"]
    steady = [sys.executable, "-c", f"import os, time; open({str(sibling)!r}, 'a').write(str(os.getpid()) + ' '); "
              "time.sleep(60)"]
    timer = threading.Timer(5.0, lambda: signal.raise_signal(signal.SIGTERM))
    timer.start()
    started = time.monotonic()
    rc = supervise([("web", steady), ("worker", dying)], backoff_start_s=0.2, backoff_max_s=0.8)
    timer.join()
    assert rc == 0 and time.monotonic() - started < 30  # only the signal stopped it
    err = capfd.readouterr().err
    assert "worker (pid" in err and "exited with status 3" in err and "worker restarted (pid" in err
    # The backoff as the supervisor states it, however many restarts the machine's speed allowed: doubling from
    # 0.2 s up to 0.8 s, never restarting at once nor waiting longer.
    delays = [float(d) for d in re.findall(r"restarting it in ([\d.]+) s", err)]
    assert len(delays) >= 2 and delays == [min(0.8, 0.2 * 2**i) for i in range(len(delays))], delays
    assert len(starts.read_text()) >= 2  # the dying worker did run again
    assert len(sibling.read_text().split()) == 1  # the web server was never restarted


def test_supervisor_stops_cleanly_on_sigterm():
    timer = threading.Timer(1.0, lambda: signal.raise_signal(signal.SIGTERM))
    timer.start()
    started = time.monotonic()
    rc = supervise([("web", _sleeper(60)), ("beat", _sleeper(60))])
    timer.join()
    assert rc == 0 and time.monotonic() - started < 30
