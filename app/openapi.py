"""The committed OpenAPI document of /api/v1: ``python -m app.openapi`` rewrites ``app/openapi.json`` from the
route table (``app.api.document`` builds it); a test fails when it drifts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.api import document
from app.api.routes import ROUTES

COMMITTED = Path(__file__).with_name("openapi.json")


def build_document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document of the route table (deterministic: same code, same bytes)."""
    return document.build_document(ROUTES)


def render() -> str:
    return json.dumps(build_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # pragma: no cover
    COMMITTED.write_text(render())
    sys.stdout.write(f"wrote {COMMITTED}\n")
