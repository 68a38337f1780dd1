"""`goodput schema`: the JSON Schema of `goodput analyze --format json` (and of what the service stores)."""

from __future__ import annotations

import argparse
import sys


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of an analysis result (generated from its types)")
    p.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    from analysis.api import result_schema_text

    sys.stdout.write(result_schema_text())
    return 0
