"""The web UI blueprint (issue #6). ``init_app`` is what ``create_app`` calls to mount it."""

from __future__ import annotations

from flask import Blueprint, Flask

bp = Blueprint("web", __name__, template_folder="templates", static_folder="static", static_url_path="/static")


def init_app(app: Flask) -> None:
    """Register the web UI on the application."""
    app.register_blueprint(bp)
