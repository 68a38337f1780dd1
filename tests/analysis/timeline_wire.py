"""The timeline's wire layout read back in Python, for tests: the pages decode the same ``fields``/``rows``
tables in the browser (``analysis.views.timeline.box_table`` writes them)."""

from __future__ import annotations

from typing import Any


def box_records(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A lane's boxes as one dict per box, keyed by field name."""
    return [dict(zip(table["fields"], row, strict=True)) for row in table["rows"]]
