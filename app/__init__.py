"""Goodput's web service: the Flask application factory, the REST API and the web UI."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from flask import Flask

from app.settings import Settings


def _secret_key(settings: Settings) -> str:
    """The configured secret, else one generated once and kept (mode 0600) in data_dir."""
    if settings.secret_key:
        return settings.secret_key
    path = Path(settings.data_dir) / "secret_key"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(48))
    return path.read_text().strip()


def create_app(settings: Settings | None = None, *, check_db: bool = True) -> Flask:
    """Build the application from ``settings`` (default: ``Settings.from_env()``).

    With ``check_db`` the metadata DB must be at the migrations' head (``app.db.NotMigrated`` says
    which command to run otherwise).
    """
    from app import db, errors, guards
    from app.api import init_app as init_api
    from app.api.request import GoodputRequest
    from app.finite_json import FiniteJSONProvider
    from app.ids import IdConverter
    from app.web import init_app as init_web

    settings = settings or Settings.from_env()
    app = Flask(__name__)
    app.request_class = GoodputRequest
    app.config.update(
        SECRET_KEY=_secret_key(settings),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.secure_cookies,
        MAX_CONTENT_LENGTH=None,  # uploads are capped on decompressed bytes while streaming
    )
    app.json = FiniteJSONProvider(app)  # never NaN or Infinity in a response: null
    app.url_map.converters["id"] = IdConverter  # before any route is added: every id goes through it
    engine = db.engine_for(settings, lock_timeout_ms=settings.db_lock_timeout_ms)
    if check_db:
        db.check_migrated(engine)
    app.extensions["goodput.settings"] = settings
    app.extensions["goodput.engine"] = engine
    app.extensions["goodput.sessionmaker"] = db.make_sessionmaker(engine)
    from app.services.accounts.token_usage import LastUseRecorder

    app.extensions["goodput.token_usage"] = LastUseRecorder(app.extensions["goodput.sessionmaker"])
    app.teardown_appcontext(db.close_request_session)
    errors.init_app(app)
    guards.init_app(app)
    init_api(app)
    init_web(app)
    return app
