"""The view serving the OpenAPI document of the routes this app mounted; kept apart from ``app.api.views``
so the route table (which imports the views) and the document built from it import in one direction."""

from __future__ import annotations

from flask import current_app, jsonify

from app.api.document import build_document

ROUTES_KEY = "goodput.api_routes"  # app.extensions entry: the route table init_app mounted


def openapi():
    return jsonify(build_document(current_app.extensions[ROUTES_KEY]))
