"""Static checks of the UI's own files: no HTML sinks in JS, no unescaped or inline code in templates,
nothing loaded from another origin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

WEB = Path(__file__).resolve().parents[2] / "app" / "web"
JS = sorted((WEB / "static" / "js").glob("*.js"))
TEMPLATES = sorted((WEB / "templates").glob("*.html"))


@pytest.mark.parametrize("path", JS, ids=lambda p: p.name)
def test_js_never_parses_strings_as_html(path: Path) -> None:
    text = path.read_text()
    assert not re.search(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|\beval\(|new Function\(",
                         text)


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_escape_and_carry_no_inline_code(path: Path) -> None:
    text = path.read_text()
    assert "|safe" not in text and "autoescape false" not in text and "Markup" not in text
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), "inline script"
    assert not re.search(r"\son[a-z]+\s*=", text), "inline event handler"
    assert not re.search(r"\sstyle\s*=", text), "inline style (CSP style-src 'self')"
    assert not re.search(r"(src|href)=\"(https?:)?//", text), "asset from another origin"


def test_every_referenced_asset_is_vendored() -> None:
    for path in TEMPLATES:
        for name in re.findall(r"url_for\('web.static', filename='([^']+)'\)", path.read_text()):
            assert (WEB / "static" / name).is_file(), f"{path.name} references missing {name}"
