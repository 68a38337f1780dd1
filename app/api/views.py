"""Thin views of /api/v1: parse the request, call a service, return JSON."""

from __future__ import annotations

from flask import jsonify

from app.db import get_session
from app.services import health as health_service
from app.settings import current_settings


def health():
    body = health_service.check(get_session(), current_settings())
    return jsonify(body), (200 if body["status"] == "ok" else 503)
