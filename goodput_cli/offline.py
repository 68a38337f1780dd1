"""Offline subcommands that need no server: `goodput analyze FILE...` and `goodput ingest FILE --out`."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis import fmt
from goodput_cli.inputs import (
    ONE_SHOT_MAX_BYTES,
    BadInput,
    discard,
    one_line,
    prepare,
    scratch_dir,
    start_first,
    take_early,
)
from goodput_cli.progress import PLAIN_AFTER_S, Progress

__all__ = ["BadInput", "add_commands"]


class ThresholdsHelp(argparse.HelpFormatter):
    """Help that ends with every threshold, its default and its range, read from the rules when the help is
    shown (not when the parser is built: every other command would pay for importing the rules)."""

    def format_help(self) -> str:
        from analysis.diagnosis.rules.registry import default_registry

        lines = ["", "thresholds (--threshold RULE.name=VALUE; default, then what it must be):"]
        for rule in default_registry():
            for name, t in rule.thresholds.items():
                lines.append(f"  {rule.id}.{name:<22} {fmt.exact(t.default)} {t.unit:<5} {t.range_text()}")
        return super().format_help() + "\n".join(lines) + "\n"


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="analyze exports offline (several files = the ranks of one run)",
                       formatter_class=ThresholdsHelp)
    p.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="nsys .sqlite / ncu .csv exports, NCCL debug logs, or DuckDB files from `goodput ingest` (not ingested again)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--rules", help="comma-separated rule ids or prefixes to run (default: all)")
    p.add_argument("--threshold", action="append", default=[], metavar="RULE.name=VALUE",
                   help="override a rule threshold, e.g. GPU001.min_gap_us=200 (repeatable)")
    p.add_argument("--top", type=int, default=None, help="show only the N costliest findings")
    p.add_argument("--window", default="steady", metavar="SPEC",
                   help="what the rules judge: steady (default: the steady phase, or the whole report without a "
                        "loop), all, startup, nvtx:NAME, iterations:A-B, time:T0-T1 (ns|us|ms|s, default ms)")
    add_progress_options(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("ingest", help="validate one export and write its normalized DuckDB file")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--out", type=Path, required=True, metavar="PATH.duckdb")
    add_progress_options(p)
    p.set_defaults(func=cmd_ingest)


def add_progress_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--progress-after", type=float, default=PLAIN_AFTER_S, metavar="S",
                   help=f"when stderr is not a terminal, print progress lines once the work has lasted S "
                        f"seconds (default {fmt.exact(PLAIN_AFTER_S)})")


def new_progress(args: argparse.Namespace) -> Progress:
    if not (math.isfinite(args.progress_after) and args.progress_after >= 0):
        raise BadInput(f"--progress-after {fmt.exact(args.progress_after)}: expected a number of seconds, 0 or more")
    return Progress(quiet=args.quiet, after_s=args.progress_after)


def parse_thresholds(items: list[str]) -> dict[str, float]:
    """``--threshold`` options checked against the rules' declared type and range, before any ingest."""
    from analysis.api import check_thresholds

    raw: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise BadInput(f"--threshold {item[:100]}: expected RULE.name=NUMBER, e.g. GPU001.min_gap_us=200")
        raw[key.strip()] = value
    try:
        return check_thresholds(raw)
    except KeyError as exc:
        shown = " ".join(items)[:100]
        raise BadInput(f"--threshold {shown}: bad_option: {' '.join(str(exc.args[0]).split())}") from None


def cmd_ingest(args: argparse.Namespace) -> int:
    from analysis.api import Limits, ingest, start_ingest_child
    from analysis.errors import TraceError

    if args.out.exists():
        raise BadInput(f"{args.out}: exists: refusing to overwrite; remove it first")
    if not args.file.is_file():
        raise BadInput(f"{args.file}: not_found: no such file")
    progress = new_progress(args)
    progress.file(args.file.name)
    limits = Limits()
    try:
        child = start_ingest_child(args.out, limits)
        result = ingest(args.file, args.out, limits=limits, progress=progress.stage, child=child)
    except TraceError as exc:
        progress.finish()
        raise one_line(args.file, exc) from None
    except OSError as exc:  # the output's folder cannot be made or written
        progress.finish()
        raise BadInput(f"{args.out}: not_writable: {exc.strerror or exc}") from None
    progress.finish(f"ingested {args.file.name}")
    counts = result.info.get("counts", {}) if result.info else {}
    print(f"{args.out}: {result.tool} report, " + ", ".join(f"{k} {fmt.count(v)}" for k, v in counts.items()))
    return 0


def run_analysis(files: list[Path], tmp: Path, progress: Progress, *, rules: list[str] | None = None,
                 thresholds: dict[str, float] | None = None, top: int | None = None,
                 outs: list[Path] | None = None, window: str | None = None,
                 children: dict[int, Any] | None = None,
                 checks: Callable[[], dict[str, float]] | None = None) -> tuple[dict, list[Path]]:
    """Ingest (or reuse) FILEs and analyze them as one run; the result and the DuckDB files.

    ``outs``: the FILEs' DuckDB files when the caller prepared them already. ``children``: ingest children
    started already (``inputs.start_first``). ``checks``: the options' checks, run beside the ingest
    (``inputs.prepare``); they return the thresholds. A KeyError (an unknown rule or threshold) goes to the
    caller, which knows the option's text.
    """
    if checks is not None:
        checked: list[dict[str, float]] = []
        outs = prepare(files, tmp, progress, children=children, once=True, checks=lambda: checked.append(checks()))
        thresholds = checked[0]
    from analysis.api import analyze

    outs = outs if outs is not None else prepare(files, tmp, progress, children=children, once=True)
    progress.file("")
    progress.step(f"analyzing {fmt.count(len(files))} report{'s' if len(files) > 1 else ''}")
    result = analyze(outs, labels=[str(f) for f in files], rules=rules, thresholds=thresholds, top=top,
                     window=window).to_json()
    for report, src in zip(result["reports"], files, strict=True):
        report["file"] = str(src)
    return result, outs


def _check_options(args: argparse.Namespace) -> dict[str, float]:
    """The thresholds, after the options' checks (a bad option is one line before any ingest)."""
    if args.top is not None and args.top < 0:  # a negative slice would drop the last findings, silently
        raise BadInput(f"--top {args.top}: expected 0 or more")
    thresholds = parse_thresholds(args.threshold)
    from analysis.api import window_parse
    from analysis.errors import TraceError

    try:
        window_parse(args.window)
    except TraceError as exc:
        raise BadInput(f"--window {args.window}: {exc.code}: {exc.message}") from None
    return thresholds


def _finish(progress: Progress | None) -> None:
    if progress is not None:
        progress.finish()


def _quick_ingest(files: list[Path]) -> bool:
    """Whether the FILEs' ingest is short enough to run beside the options' checks (together at most
    ``inputs.ONE_SHOT_MAX_BYTES``): a bad option then still fails fast, while a larger export's ingest waits
    for the checks, so that a bad option is one line before a long copy."""
    try:
        return sum(f.stat().st_size for f in files) <= ONE_SHOT_MAX_BYTES
    except OSError:
        return False  # a missing FILE: the checks first, then the FILE's own error


def cmd_analyze(args: argparse.Namespace) -> int:
    from analysis.errors import TraceError

    rules = [r for r in (args.rules or "").split(",") if r.strip()] or None
    progress: Progress | None = None
    try:
        early = take_early()  # started by goodput_cli.main before the parser (inputs.start_early)
        scratch = None if early is not None else scratch_dir([str(f) for f in args.files])
        with early.tmp if early is not None else tempfile.TemporaryDirectory(prefix="goodput-", dir=scratch) as tmp:
            # The first export's ingest child starts first: its start-up (Python, DuckDB, the signed scanner)
            # overlaps the options' checks, which import the rules. It reads nothing before validation.
            children = early.take(args.files) if early is not None else start_first(args.files, Path(tmp))
            if _quick_ingest(args.files):
                # The options' checks import every rule (as long as a small export's whole ingest): they run
                # beside it, and what they raise is raised before any error of the ingest.
                try:
                    shown = progress = new_progress(args)
                except BaseException:
                    discard(children)
                    raise
                shown.hold()  # a bad option stays one line: no progress line before it

                def checks() -> dict[str, float]:
                    thresholds = _check_options(args)
                    shown.release()
                    return thresholds

                result, _ = run_analysis(args.files, Path(tmp), progress, rules=rules, top=args.top,
                                         window=args.window, children=children, checks=checks)
            else:
                gc.enable()  # off for a small input (``goodput_cli.main``): a long analysis frees its cycles
                try:
                    thresholds = _check_options(args)
                except BaseException:
                    discard(children)
                    raise
                progress = new_progress(args)  # its clock starts with the work it reports on
                result, _ = run_analysis(args.files, Path(tmp), progress, rules=rules, thresholds=thresholds,
                                         top=args.top, window=args.window, children=children)
    except KeyError as exc:
        _finish(progress)
        raise BadInput(f"{args.rules or args.threshold}: bad_option: {exc.args[0]}") from None
    except TraceError as exc:
        _finish(progress)
        if exc.code != "bad_window":
            raise
        raise BadInput(f"--window {args.window}: {exc.code}: {' '.join(exc.message.split())}") from None
    except BaseException:
        _finish(progress)
        raise
    assert progress is not None
    progress.finish(f"analyzed {fmt.count(len(args.files))} report{'s' if len(args.files) > 1 else ''}")
    if args.format == "json":
        # One write: ``json.dump`` writes each of its thousands of pieces (a system call each when stdout is
        # unbuffered, as under PYTHONUNBUFFERED). Never Infinity: not JSON.
        sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False) + os.linesep)
    else:
        from goodput_cli import render  # the text renderers: not for --format json

        sys.stdout.write(render.text(result))
    return 0
