"""The Rules page and the upload form show each threshold's type and range, as the rules declare them."""

from __future__ import annotations

import html

from analysis.diagnosis.rules.registry import default_registry


def test_rules_page_and_upload_form_show_every_range(client) -> None:
    page = html.unescape(client.get("/rules").get_data(as_text=True))
    upload = html.unescape(client.get("/upload").get_data(as_text=True))
    for rule in default_registry():
        for name, t in rule.thresholds.items():
            assert f"{rule.id}.{name}" in page and t.range_text() in page
            assert f"{rule.id}.{name}={t.default}" in upload and t.range_text() in upload
