"""Administrative subcommands: `migrate`, `token create|list|revoke`, `user create` (issue #5)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the admin subcommands (filled in by issue #5)."""
