"""`goodput diff A B`: compare two runs offline (exports or DuckDB files) or on a server (run ids).

The comparison is ``analysis.views.compare``'s, the one the service's compare page and API use, so the
numbers are the same by construction. Exit status: 0, or 1 when ``--fail-on`` finds that B regressed
against A, or 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

from analysis import fmt
from goodput_cli import gate
from goodput_cli.inputs import BadInput, prepare
from goodput_cli.offline import add_progress_options, new_progress, run_analysis

DEFAULT_NOISE_PCT = 5.0  # analysis.views.compare.DEFAULT_NOISE_PCT, repeated so that --help imports no analysis


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff", help="compare run B against run A (exports, DuckDB files, or run ids with --server)",
        description="Compare run B (head) against run A (base): per step when both have loops (step time and "
                    "its parts), kernels per launch, each tested for significance (Mann-Whitney U) above a noise "
                    "floor; totals beside; findings matched by rule and scope. A run of several ranks: "
                    "--base FILE... --head FILE... instead of A B.")
    p.add_argument("runs", nargs="*", metavar="A B", help="two exports / DuckDB files, or two run ids with --server")
    p.add_argument("--base", nargs="+", default=None, metavar="FILE", help="the files of run A (its ranks)")
    p.add_argument("--head", nargs="+", default=None, metavar="FILE", help="the files of run B (its ranks)")
    p.add_argument("--server", default=None, help="compare run ids on this Goodput server, e.g. http://goodput:8000")
    p.add_argument("--token", default=None, help="API token with read scope (default: $GOODPUT_TOKEN)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--noise-pct", type=float, default=DEFAULT_NOISE_PCT, metavar="PCT",
                   help="the floor on the effect size: a significant change of a median (per step, per launch) "
                        f"smaller than this percentage is not a change (default {fmt.exact(DEFAULT_NOISE_PCT)})")
    p.add_argument("--fail-on", default=None, metavar="CHECKS",
                   help="exit 1 when B regressed this far, e.g. goodput:-2pt,step_time:+5%%,new_findings:+1,"
                        "kernel:ncclDevKernel_SendRecv:+10%% (step_time and kernel: only significant changes fail)")
    p.add_argument("--window", default="steady", metavar="SPEC",
                   help="offline: the part of each report both runs are judged on, as in `goodput analyze` "
                        "(default steady, what the service records unless a run asked for another)")
    add_progress_options(p)
    p.set_defaults(func=cmd_diff)


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.base or args.head:
        if args.runs or not (args.base and args.head):
            raise BadInput("diff: give either A B, or both --base FILE... and --head FILE...")
        return list(args.base), list(args.head)
    if len(args.runs) != 2:
        raise BadInput(f"diff: expected two runs A B, got {fmt.count(len(args.runs))}")
    return [args.runs[0]], [args.runs[1]]


def cmd_diff(args: argparse.Namespace) -> int:
    checks = None
    if args.fail_on is not None:
        try:
            checks = gate.parse(args.fail_on)
        except gate.GateError as exc:
            raise BadInput(str(exc)) from None
    if not 0 <= args.noise_pct <= 100:
        raise BadInput(f"--noise-pct {fmt.exact(args.noise_pct)}: expected 0 to 100")
    base, head = _sides(args)
    diff = _remote(args, base, head) if args.server else _offline(args, base, head)
    results = gate.evaluate(checks, diff) if checks else []
    if results:
        diff["gate"] = results
    if args.format == "json":
        json.dump(diff, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write(os.linesep)
    else:
        from goodput_cli.render_diff import text

        sys.stdout.write(text(diff))
    return 1 if any(r["status"] == "failed" for r in results) else 0


def _offline(args: argparse.Namespace, base: list[str], head: list[str]) -> dict[str, Any]:
    from analysis.api import compare_facts, run_facts

    progress = new_progress(args)
    try:
        with tempfile.TemporaryDirectory(prefix="goodput-diff-") as tmp:
            # Both runs' files are read (and rejected, if bad) before either is analyzed.
            paths = [Path(f) for f in base + head]
            prepared = prepare(paths, Path(tmp), progress)
            facts = []
            for name, files, outs in (("base", paths[:len(base)], prepared[:len(base)]),
                                      ("head", paths[len(base):], prepared[len(base):])):
                result, _ = run_analysis(files, Path(tmp), progress, outs=outs, window=args.window)
                progress.step(f"kernel launches and steps of {name}")
                facts.append(run_facts(str(files[0]) if len(files) == 1 else [str(f) for f in files],
                                       result["reports"], result["findings"], outs,
                                       collectives=result.get("collectives")))
            progress.step("comparing")
            # Inside the temporary directory: the comparison may measure a step again from a file.
            diff = compare_facts(facts[0], facts[1], noise_pct=args.noise_pct)
    except BaseException:
        progress.finish()
        raise
    progress.finish("compared")
    return cast("dict[str, Any]", diff)  # JSON from here on, as the server's answer: the gate adds its results


def _remote(args: argparse.Namespace, base: list[str], head: list[str]) -> dict[str, Any]:
    from goodput_cli.upload import Client, UploadError

    if len(base) != 1 or len(head) != 1 or not (base[0].isdigit() and head[0].isdigit()):
        raise BadInput("diff --server: expected two run ids, e.g. goodput diff 12 15 --server URL")
    token = args.token or os.environ.get("GOODPUT_TOKEN", "")
    if not token:
        raise BadInput("diff --server: no token: pass --token or set GOODPUT_TOKEN")
    client = Client(args.server, token, quiet=args.quiet)
    try:
        return client.compare(int(base[0]), int(head[0]), noise_pct=args.noise_pct)
    except UploadError as exc:
        # Not found, bad token: the user's to fix (2); an unreachable server: 1, like `goodput upload`.
        if exc.status == 2:
            raise BadInput(str(exc)) from None
        raise
