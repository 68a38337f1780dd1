"""Helpers of the web and accounts attacks: signing in as a browser does, and looking at what is stored."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from app.models import Job, Report, Run
from app.settings import Settings

PASSWORD = "correct-horse-battery"


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF field in the form"
    return match.group(1)


def sign_in(client, username: str, password: str = PASSWORD, next_: str | None = None, address: str = "10.0.0.1"):
    """POST the sign-in form as a browser would (fresh CSRF token from the page); returns the response."""
    env = {"REMOTE_ADDR": address}
    token = csrf_of(client.get("/login", environ_base=env).get_data(as_text=True))
    path = "/login" if next_ is None else f"/login?next={next_}"
    return client.post(path, data={"username": username, "password": password, "csrf_token": token},
                       environ_base=env)


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def stored_files(settings: Settings) -> list[Path]:
    """Everything under data_dir except the generated secret key: uploads, staging, reports."""
    return [p for p in files_under(settings.data_dir) if p.name != "secret_key"]


def row_counts(db) -> dict[str, int]:
    db.rollback()
    return {m.__tablename__: db.scalar(sa.select(sa.func.count()).select_from(m)) for m in (Job, Run, Report)}
