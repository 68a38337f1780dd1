"""CLI latency benchmark: `goodput analyze` on the corpus exports under 5 MB, `--help`, an argument
error and `analyze report.duckdb`, each timed against the same command on a previous release of the code
(a `git archive` of --baseline into a temporary folder, run with the same interpreter), interleaved run by
run and summarized as medians; plus the time to the first progress line and to the first result line on a
large export built by ``benchmarks/make_big_export.py``.

    .venv/bin/python benchmarks/cli_latency.py                      # full: all exports, 10M-kernel export
    .venv/bin/python benchmarks/cli_latency.py --files 6 --repeat 3 --kernels 200000   # a quick look
    .venv/bin/python benchmarks/cli_latency.py --large-only --no-results   # the 10M-kernel first lines alone

The machine's load average is printed before and after: on a shared machine read the medians with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "nsys"
BASELINE = "a7cf72b"   # the code the CLI latency work is measured against
SMALL = 5 * 2**20
CLI = "import sys; from goodput_cli.main import main; sys.exit(main())"
RESULTS = ROOT / "benchmarks" / "RESULTS-cli.md"
LOG: list[str] = []


def say(*parts: object, flush: bool = False) -> None:
    """Print, and keep the line for RESULTS-cli.md."""
    text = " ".join(str(p) for p in parts)
    print(text, flush=flush)
    LOG.append(text)


def checkout(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (tracked files only) under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "src.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return into


def command(code: Path, *args: str) -> tuple[list[str], dict[str, str], Path]:
    """Run the CLI of the tree at ``code``: it is first on sys.path (the working directory) and on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env["PYTHONPATH"] = str(code)
    return [sys.executable, "-c", CLI, *args], env, code


def _cpu() -> float:
    # Finished descendants (the CLI and the ingest child it waited for) accumulate here.
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(code: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree) of one run."""
    cmd, env, cwd = command(code, *args)
    c0, t0 = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}) with {code}: {proc.stderr[-2000:]}")
    return wall, cpu


def interleaved(trees: dict[str, Path], args: tuple[str, ...], repeat: int, ok=(0,)) -> dict[str, float]:
    """Median wall seconds per tree (and ``<tree> cpu``: median CPU seconds), the trees' runs alternating
    so that load changes hit both alike. CPU time hardly depends on the load: on a shared machine it is
    the steadier measure of the cost."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for _ in range(repeat):
        for name, code in trees.items():
            times[name].append(timed(code, *args, ok=ok))
    out = {name: statistics.median(w for w, _ in v) for name, v in times.items()}
    out.update({f"{name} cpu": statistics.median(c for _, c in v) for name, v in times.items()})
    return out


def first_lines(code: Path, src: Path, *extra: str) -> dict[str, float]:
    """Seconds to the first progress line on stderr, to the first result line on stdout, and to the end.

    The baseline printed progress on a terminal only: its first progress line is "nan" here."""
    cmd, env, cwd = command(code, "analyze", str(src), *extra)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_err = proc.stderr.readline()
    t_err = time.perf_counter() - t0
    first_out = proc.stdout.readline()
    t_out = time.perf_counter() - t0
    proc.stderr.read()
    proc.stdout.read()
    proc.wait()
    if proc.returncode != 0 or not first_out:
        raise SystemExit(f"analyze {src} failed ({proc.returncode})")
    return {"first_progress_s": t_err if first_err else float("nan"), "first_result_s": t_out,
            "total_s": time.perf_counter() - t0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help=f"the previous release's commit (default {BASELINE})")
    parser.add_argument("--repeat", type=int, default=5, help="runs per command and tree (median; default 5)")
    parser.add_argument("--files", type=int, default=0, help="only the N smallest exports under 5 MB (0: all)")
    parser.add_argument("--match", default="", help="only the exports whose name contains this text")
    parser.add_argument("--large-only", action="store_true",
                        help="only the large export's first lines, on this tree (no baseline, no small exports)")
    parser.add_argument("--kernels", type=int, default=10_000_000, help="kernels in the large export (0: skip)")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench-out" / "cli")
    parser.add_argument("--no-results", action="store_true", help=f"do not rewrite {RESULTS.name}")
    args = parser.parse_args()
    say("Command: `" + " ".join(["python benchmarks/cli_latency.py", *sys.argv[1:]]) + "`")
    say()

    say(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="goodput-cli-bench-") as tmp:
        trees = {"this": ROOT, "baseline": checkout(args.baseline, Path(tmp) / "baseline")}
        rows = []
        small = (("goodput --help", ("--help",), (0,)),
                 ("argument error (analyze, no FILE)", ("analyze",), (2,)),
                 ("bad --fail-on (diff)", ("diff", "a", "b", "--fail-on", "goodput:2"), (2,)))
        if args.large_only:
            trees, small = {"this": ROOT}, ()
        for label, argv, ok in small:
            if label.startswith("bad --fail-on"):  # no `diff` in the baseline
                times = {"baseline": None, **interleaved({"this": ROOT}, argv, args.repeat, ok)}
            else:
                times = interleaved(trees, argv, args.repeat, ok)
            rows.append((label, times))
        files = sorted((p for p in CORPUS.glob("*.sqlite") if p.stat().st_size < SMALL), key=lambda p: p.stat().st_size)
        files = [p for p in files if args.match in p.name and not args.large_only]
        if args.files:
            files = files[: args.files]
        per_file = []
        for src in files:
            # JSON: the same analysis in both trees without the text renderer (the baseline's failed on one export).
            t = interleaved(trees, ("analyze", str(src), "--quiet", "--format", "json"), args.repeat)
            per_file.append((src, t))
            say(f"- analyze {src.name} ({src.stat().st_size / 2**20:.1f} MiB): this {t['this']:.2f} s "
                  f"(CPU {t['this cpu']:.2f} s), baseline {t['baseline']:.2f} s (CPU {t['baseline cpu']:.2f} s)",
                  flush=True)
        report = Path(tmp) / "r.duckdb"
        src = files[len(files) // 2] if files else None
        if src is not None:
            subprocess.run([sys.executable, "-c", CLI, "ingest", str(src), "--out", str(report), "--quiet"],
                           cwd=ROOT, check=True)
            t_db = interleaved({"this": ROOT}, ("analyze", str(report), "--quiet", "--format", "json"), args.repeat)
            t_src = next(t for f, t in per_file if f == src)
            rows.append((f"analyze report.duckdb ({src.name})", {"baseline": None, **t_db}))
            rows.append(("  the same export, ingested first", t_src))

        if rows:
            say()
            say("| command | this tree: wall s | CPU s | baseline: wall s | CPU s |")
            say("|---|---|---|---|---|")

        def cells(t: dict) -> str:
            base = "- | -" if t.get("baseline") is None else f"{t['baseline']:.3f} | {t['baseline cpu']:.3f}"
            return f"{t['this']:.3f} | {t['this cpu']:.3f} | {base}"

        for label, t in rows:
            say(f"| {label} | {cells(t)} |")
        if per_file:
            med = {k: statistics.median(t[k] for _, t in per_file) for k in per_file[0][1]}
            worst = {k: max(t[k] for _, t in per_file) for k in per_file[0][1]}
            say(f"| analyze, {len(per_file)} corpus exports < 5 MB: median of the medians | {cells(med)} |")
            say(f"| analyze, the slowest export's median | {cells(worst)} |")
            over = [f.name for f, t in per_file if t["this"] > 1.0]
            say(f"exports over 1.0 s (this tree): {len(over)} of {len(per_file)} {over if over else ''}")

        if args.kernels:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from make_big_export import DEFAULT_BASE, build

            big = args.workdir / f"big-{args.kernels}.sqlite"
            if not big.exists():
                say(f"building a {args.kernels:,}-kernel export at {big} ...", flush=True)
                build(DEFAULT_BASE, big, args.kernels)
            for name, code in trees.items():
                r = first_lines(code, big, *(("--progress-after", "0") if name == "this" else ()))
                say(f"large export ({args.kernels:,} kernels, {big.stat().st_size / 2**20:,.0f} MiB), {name}: "
                      f"first progress line {r['first_progress_s']:.2f} s, first result line "
                      f"{r['first_result_s']:.2f} s, done {r['total_s']:.2f} s", flush=True)
    say(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.no_results:
        RESULTS.write_text("# CLI latency (benchmarks/cli_latency.py)\n\n" + "\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
