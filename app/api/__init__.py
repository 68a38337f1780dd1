"""The ``api_v1`` blueprint: every route in one table (path, methods, view, scope, OpenAPI operation)."""

from __future__ import annotations

from flask import Blueprint, Flask

from app.api import routes

bp = Blueprint("api_v1", __name__, url_prefix="/api/v1")


def init_app(app: Flask) -> None:
    """Register the API routes (from ``routes.ROUTES``) under /api/v1."""
    for route in routes.ROUTES:
        bp.add_url_rule(route.path, endpoint=route.endpoint, view_func=route.wrapped(),
                        methods=list(route.methods))
    app.register_blueprint(bp)
