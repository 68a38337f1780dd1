"""The ``api_v1`` blueprint: every route in one table (``routes.ROUTES``), mounted at /api/v1."""

from __future__ import annotations

from flask import Blueprint, Flask

from app.api import docs, routes


def init_app(app: Flask) -> None:
    """Register the API routes under /api/v1 (a fresh blueprint per app: create_app may run many times)."""
    bp = Blueprint("api_v1", __name__, url_prefix="/api/v1")
    for route in routes.ROUTES:
        bp.add_url_rule(route.path, endpoint=route.endpoint, view_func=route.wrapped(), methods=[route.method])
    app.register_blueprint(bp)
    app.extensions[docs.ROUTES_KEY] = routes.ROUTES
