"""Entry point of the `goodput` command: parses arguments and dispatches to one subcommand module.

Bad input exits with status 2 and exactly one line on stderr: ``goodput: FILE: CODE: message``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from goodput_cli import admin, diff, offline, operations, rules, schema, service, upload
from goodput_cli.errors import UsageError

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="goodput", description="Where does your GPU time go?")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (offline, diff, admin, service, operations, schema, rules):
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except offline.BadInput as exc:
        print(f"goodput: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UsageError as exc:
        print(f"goodput: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except upload.UploadError as exc:
        print(f"goodput: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
