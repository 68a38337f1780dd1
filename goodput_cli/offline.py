"""Offline subcommands that need no server: `goodput analyze FILE...` and `goodput ingest FILE --out`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from analysis.api import Limits, analyze, ingest, window_parse
from analysis.errors import TraceError
from goodput_cli import render


class BadInput(Exception):
    """One line for stderr: ``FILE: CODE: message``."""


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="analyze exports offline (several files = the ranks of one run)")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--rules", help="comma-separated rule ids or prefixes to run (default: all)")
    p.add_argument("--threshold", action="append", default=[], metavar="RULE.name=VALUE",
                   help="override a rule threshold, e.g. GPU001.min_gap_us=200 (repeatable)")
    p.add_argument("--top", type=int, default=None, help="show only the N costliest findings")
    p.add_argument("--window", default="steady", metavar="SPEC",
                   help="what the rules judge: steady (default: the steady phase, or the whole report without a "
                        "loop), all, startup, nvtx:NAME, iterations:A-B, time:T0-T1 (ns|us|ms|s, default ms)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("ingest", help="validate one export and write its normalized DuckDB file")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--out", type=Path, required=True, metavar="PATH.duckdb")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_ingest)


def parse_thresholds(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise BadInput(f"--threshold {item}: expected RULE.name=NUMBER, e.g. GPU001.min_gap_us=200") from None
    return out


def _progress(enabled: bool, label: str):
    if not enabled:
        return None

    def report(stage: str, done: int, total: int) -> None:
        pct = f" {100 * done // total}%" if total else ""
        print(f"\r{label}: {stage}{pct}\x1b[K", end="", file=sys.stderr, flush=True)

    return report


def _ingest_one(src: Path, out: Path, show_progress: bool):
    if not src.is_file():
        raise BadInput(f"{src}: not_found: no such file")
    try:
        result = ingest(src, out, limits=Limits(), progress=_progress(show_progress, src.name))
    except TraceError as exc:
        # Exactly one line on stderr, whatever the reader put in its message.
        raise BadInput(f"{src}: {exc.code}: {' '.join(exc.message.split())}") from None
    finally:
        if show_progress:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)
    return result


def cmd_ingest(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise BadInput(f"{args.out}: exists: refusing to overwrite; remove it first")
    show = not args.quiet and sys.stderr.isatty()
    result = _ingest_one(args.file, args.out, show)
    counts = result.info.get("counts", {})
    print(f"{args.out}: {result.tool} report, " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    thresholds = parse_thresholds(args.threshold)
    rules = [r for r in (args.rules or "").split(",") if r.strip()] or None
    try:
        window_parse(args.window)
    except TraceError as exc:
        raise BadInput(f"--window {args.window}: {exc.code}: {exc.message}") from None
    show = not args.quiet and sys.stderr.isatty()
    with tempfile.TemporaryDirectory(prefix="goodput-") as tmp:
        outs = []
        for i, src in enumerate(args.files):
            out = Path(tmp) / f"{i}.duckdb"
            _ingest_one(src, out, show)
            outs.append(out)
        try:
            result = analyze(outs, labels=[str(f) for f in args.files], rules=rules,
                             thresholds=thresholds, top=args.top, window=args.window)
        except KeyError as exc:
            raise BadInput(f"{args.rules or args.threshold}: bad_option: {exc.args[0]}") from None
        except TraceError as exc:
            raise BadInput(f"--window {args.window}: {exc.code}: {' '.join(exc.message.split())}") from None
    for report, src in zip(result["reports"], args.files, strict=True):
        report["file"] = str(src)
    if args.format == "json":
        json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write(os.linesep)
    else:
        sys.stdout.write(render.text(result))
    return 0
