"""Entry point of the `goodput` command: parses arguments and dispatches to one subcommand module.

Bad input exits with status 2 and exactly one line on stderr: ``goodput: FILE: CODE: message``.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

# NumPy's OpenBLAS starts a thread per core at import and lets it spin: on a 2-core machine that stole 0.1 s of
# CPU from the ingest child while the analysis code was imported. The analysis does no linear algebra (no BLAS
# call, so no number depends on it); a caller's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from goodput_cli import inputs  # light: the early ingest child needs it before the commands

if TYPE_CHECKING:
    import argparse

EXIT_BAD_INPUT = 2


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command's parser; for `goodput analyze` (``argv``'s first word) only the offline commands' (the
    others import the server's client and the text renderers: 8 ms of every analysis). A subcommand's help,
    usage and errors are the same either way."""
    import argparse

    from goodput_cli import offline

    parser = argparse.ArgumentParser(prog="goodput", description="Where does your GPU time go?")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if list(argv[:1]) == ["analyze"]:
        offline.add_commands(sub)
        return parser
    from goodput_cli import admin, diff, operations, rules, schema, service

    for module in (offline, diff, admin, service, operations, schema, rules):
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    program = argv is None  # the process's own command line: the process ends with the command
    argv = list(sys.argv[1:] if argv is None else argv)
    if program and argv[:1] == ["analyze"]:
        # No cycle collection in a process that ends with the command (``_exit``): on a small export the ~90
        # collections during the imports and the analysis took 11 ms of its 0.36 s, and they free nothing that
        # a short command needs back. A large input turns it on again (``offline.cmd_analyze``).
        gc.disable()
    # `goodput analyze` on an export: its ingest child starts before the commands' modules are imported.
    inputs.start_early(argv)
    try:
        status = _run(argv)
    finally:
        inputs.drop_early()  # not taken by the command: a parse error, --help
    if program and argv[:1] == ["analyze"]:
        _exit(status)
    return status


def _exit(status: int) -> NoReturn:
    """End the process now, once what it printed is flushed. `goodput analyze` has closed its files, removed
    its temporary folder and reaped its ingest child by the time it returns; what the interpreter's own
    shutdown would add is tearing down NumPy, DuckDB and ~600 modules (30-40 ms, 7 % of the command on a small
    export). A flush that fails (a closed pipe) raises here, and the interpreter ends as usual."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _run(argv: list[str]) -> int:
    from goodput_cli.errors import UploadError, UsageError

    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except inputs.BadInput as exc:
        print(f"goodput: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UsageError as exc:
        print(f"goodput: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UploadError as exc:
        print(f"goodput: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
