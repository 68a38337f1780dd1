"""Subcommands that run or talk to the service: `serve`, `worker`, `beat`, `upload` (issue #5)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the service subcommands (filled in by issue #5)."""
