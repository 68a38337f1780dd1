"""Errors every subcommand may raise; ``goodput_cli.main`` prints them (subcommands never import main)."""

from __future__ import annotations


class UsageError(Exception):
    """A command-line mistake; printed as one line, exit status 2."""


class UploadError(Exception):
    """A failure to report in one line; ``status`` is the exit status (the commands that talk to a server)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
