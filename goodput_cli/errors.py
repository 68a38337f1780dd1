"""Errors every subcommand may raise; ``goodput_cli.main`` prints them (subcommands never import main)."""

from __future__ import annotations


class UsageError(Exception):
    """A command-line mistake; printed as one line, exit status 2."""
