"""The API reference page: Swagger UI (vendored under static/vendor, so it works offline) rendering
/api/v1/openapi.json, with worked examples for the calls a scheduler makes."""

from __future__ import annotations

from flask import make_response, render_template

from app.web import bp
from app.web.security import CSP

# Swagger UI sets style attributes on its own elements; only this page allows them (no inline script).
DOCS_CSP = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")


@bp.route("/api/docs")
def api_docs():
    """Public like the OpenAPI document it renders: scheduler authors read it before they hold a token."""
    response = make_response(render_template("api_docs.html"))
    response.headers["Content-Security-Policy"] = DOCS_CSP
    return response
