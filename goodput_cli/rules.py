"""`goodput rules`: the rule reference, generated from the rule classes (docs/rule-reference.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

HEADER = """# Rule reference

Generated from the rule classes by `goodput rules > docs/rule-reference.md`; a test fails when this file
and the code drift apart. Each rule's text is its class docstring; its thresholds are overridable per
run (`--threshold ID.name=value`, the upload form, the API's `thresholds`). How the rules share time
and how the verdict picks among them: [analysis.md](analysis.md).
"""


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rules", help="print the rule reference as Markdown (ids, docs, thresholds, requirements)")
    p.set_defaults(func=cmd_rules)


def cmd_rules(args: argparse.Namespace) -> int:
    from analysis.api import rule_catalogue

    sys.stdout.write(reference_markdown(rule_catalogue()))
    return 0


def reference_markdown(catalogue: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown reference of ``catalogue`` (``analysis.api.rule_catalogue()``), rules in id order."""
    rules = sorted(catalogue, key=lambda rule: str(rule["id"]))
    out = [HEADER, "| id | name | tool | what it flags |", "| --- | --- | --- | --- |"]
    for rule in rules:
        out.append(f"| [{rule['id']}](#{str(rule['id']).lower()}) | `{rule['name']}` | {rule['tool']} | "
                   f"{_cell(rule.get('summary') or '')} |")
    for rule in rules:
        out += ["", f"## {rule['id']}", "", f"`{rule['name']}` · {rule['category']} · {rule['tool']}", "",
                str(rule.get("doc") or "").strip()]
        requires = rule.get("requires") or []
        if requires:
            out += ["", "Requires: " + ", ".join(f"`{name}`" for name in requires) + "."]
        thresholds = rule.get("thresholds") or {}
        if thresholds:
            out += ["", "| threshold | default | unit | range | meaning |", "| --- | --- | --- | --- | --- |"]
            for key, spec in thresholds.items():
                out.append(f"| `{key}` | {spec.get('default')} | {spec.get('unit') or ''} | "
                           f"{_cell(str(spec.get('range') or ''))} | {_cell(str(spec.get('help') or ''))} |")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
