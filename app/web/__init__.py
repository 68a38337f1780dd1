"""The web UI blueprint. ``init_app`` is what ``create_app`` calls to mount it."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask

from app import finite_json

bp = Blueprint("web", __name__, template_folder="templates", static_folder="static", static_url_path="/assets")


def _tojson_attr(value: Any) -> str:
    # A plain str (not Markup): autoescaping then escapes quotes, <, > and & for the attribute.
    return finite_json.dumps(value, separators=(",", ":"), default=str)


def init_app(app: Flask) -> None:
    """Register the web UI on the application: routes, security headers, template helpers."""
    from app.web import (  # noqa: F401 - routes
        filters,
        security,
        views_api_docs,
        views_auth,
        views_data,
        views_pages,
        views_run_delete,
        views_run_timeline,
    )

    if "web" not in app.blueprints:
        app.register_blueprint(bp)
    app.after_request(security.security_headers)
    app.jinja_env.autoescape = True
    app.jinja_env.filters["tojson_attr"] = _tojson_attr
    filters.register(app)
    app.context_processor(lambda: {"csrf_token": security.csrf_token})
    app.register_error_handler(404, _not_found)


def _not_found(exc):
    """Pages answer 404 inside the site's layout (navigation kept); /api/ and JSON clients keep the JSON error."""
    from flask import render_template

    from app.errors import _wants_json

    if _wants_json():
        from flask import jsonify

        from app.errors import error_body
        response = jsonify(error_body("NOT_FOUND", exc.description or "Not found"))
        response.status_code = 404
        return response
    return render_template("404.html", message=exc.description or "This page does not exist."), 404
