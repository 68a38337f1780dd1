"""docs/rule-reference.md is generated from the rule classes; it must not drift from them."""

from __future__ import annotations

from pathlib import Path

from analysis.api import rule_catalogue
from goodput_cli.rules import reference_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_rule_reference_is_generated_from_the_rules() -> None:
    committed = (ROOT / "docs" / "rule-reference.md").read_text()
    assert committed == reference_markdown(rule_catalogue()), (
        "docs/rule-reference.md drifted from the rule classes: regenerate it with "
        "`.venv/bin/goodput rules > docs/rule-reference.md`")


def test_every_rule_has_a_section_with_its_docstring() -> None:
    text = reference_markdown(rule_catalogue())
    for rule in rule_catalogue():
        assert f"\n## {rule['id']}\n" in text
        first_line = str(rule["doc"]).strip().splitlines()[0]
        assert first_line in text


def test_table_cells_cannot_break_the_table() -> None:
    text = reference_markdown([{"id": "X001", "name": "x.y", "tool": "nsys", "category": "c",
                                "summary": "a | b\nc", "doc": "Doc.", "requires": [], "thresholds": {}}])
    assert "| a \\| b c |" in text
