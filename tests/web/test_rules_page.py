"""The Rules page and the upload form show each threshold's type and range, as the rules declare them."""

from __future__ import annotations

import html

import pytest

from analysis.diagnosis.rules.registry import default_registry
from app.web.filters import numbers_formatted


def test_rules_page_and_upload_form_show_every_range(client) -> None:
    page = html.unescape(client.get("/rules").get_data(as_text=True))
    upload = html.unescape(client.get("/upload").get_data(as_text=True))
    for rule in default_registry():
        for name, t in rule.thresholds.items():
            # the page writes the range's numbers as every number on the pages ("1e+06" is "1,000,000")
            assert f"{rule.id}.{name}" in page and numbers_formatted(t.range_text()) in page
            assert f"{rule.id}.{name}={t.default}" in upload and t.range_text() in upload


@pytest.mark.parametrize(("text", "shown"), [
    ("a whole number from 1 to 1e+06", "a whole number from 1 to 1,000,000"),
    ("a number from 0 to 100 %", "a number from 0 to 100 %"),
    ("a number from 0.5 to 100000 GB/s (or 0)", "a number from 0.500 to 100,000 GB/s (or 0)"),
    ("a number from -inf to inf", "a number from -inf to inf"),
])
def test_range_numbers_are_formatted(text, shown) -> None:
    assert numbers_formatted(text) == shown
