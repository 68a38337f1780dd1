"""A body that stops arriving while a request thread reads it (the worker's socket idle timeout raises
BodyTimeout in the read) is the API's JSON 408 with the connection closed, and nothing is stored; other
timeouts are not the client's."""

from __future__ import annotations

import sqlalchemy as sa

from app.errors import BodyTimeout
from app.models import Report


class Stalling:
    """A request body (``wsgi.input``) whose first bytes arrive, then the socket times out."""

    def __init__(self) -> None:
        self.sent = False

    def read(self, size: int = -1) -> bytes:
        if not self.sent:
            self.sent = True
            return b"SQLite format 3\x00"
        raise BodyTimeout("timed out")  # what the web worker's client socket raises past its idle timeout


def test_a_stalled_upload_body_is_408_and_stores_nothing(client, auth, session, settings):
    run_id = client.post("/api/v1/runs", headers=auth["write"], json={"job": "stall"}).json["id"]
    r = client.put(f"/api/v1/runs/{run_id}/reports/a.sqlite", headers=auth["write"],
                   environ_overrides={"wsgi.input": Stalling(), "CONTENT_LENGTH": "1000000"})
    assert r.status_code == 408, r.get_data()[:300]
    assert r.headers["Connection"] == "close" and r.json["error"]["code"] == "REQUEST_TIMEOUT"
    assert session.scalar(sa.select(sa.func.count()).select_from(Report)) == 0
    staging = settings.data_dir / "staging"
    assert not staging.exists() or not any(staging.iterdir())
    assert client.get("/api/v1/health").status_code == 200


def test_a_timeout_that_is_not_the_bodys_is_not_a_408(app, client, auth):
    @app.get("/api/v1/test-timeout")
    def _timeout():
        raise TimeoutError("a backend timed out")

    r = client.get("/api/v1/test-timeout", headers=auth["read"])
    assert r.status_code == 500 and r.json["error"]["code"] == "INTERNAL"
