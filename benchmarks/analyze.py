"""Analysis benchmark: every nsys rule and summary on the big export, against that export's ingest time.

Builds the large export with ``make_big_export.py`` (a real corpus export replicated N times), then in
one run, each step in its own process so that peak RSS is that step's alone:

* ``ingest``: ``analysis.api.ingest`` of the export (the reference time);
* ``analyze``: every summary (breakdown, NVTX projection, iterations, launches) then
  every nsys rule (one at a time, timed) on the whole ingested DuckDB file, as ``goodput analyze
  --window all`` runs them;
* ``analyze_steady``: what ``goodput analyze`` runs since: the loop and phases of the whole file, then
  every summary and rule on the steady window (the same round, so the two compare on one machine).

The two steps alternate for ``--repeat`` rounds (default 2) and the fastest of each is compared, so
that a slow round of either (other work on the machine, cold memory) does not decide the ratio; every
round is listed.

``--compare STEP,STEP,...`` runs only the named analysis steps on the ingested file (ingested once when
missing), interleaved for ``--repeat`` rounds, and prints each step's medians and their ratio to the last
step named (the baseline). ``analyze_steady_noanatomy`` is ``analyze_steady`` with the idle anatomy and
the idle claims switched off in its own process (the cost of the anatomy, measured in the same run):

    .venv/bin/python benchmarks/analyze.py --workdir /tmp/da_bench --kernels 1000000 --keep --reuse \
        --repeat 3 --compare analyze_steady,analyze_steady_noanatomy

Target: analysis <= 1/4 of the ingest time, peak RSS < 2 GiB. With ``--devices N`` (default 8) the
ingested file is also analyzed with its GPU work dealt over N devices (many more idle gaps).

    .venv/bin/python benchmarks/analyze.py                       # 10M kernels
    .venv/bin/python benchmarks/analyze.py --kernels 1000000 --no-results
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.model.trace import DUCKDB_MEMORY_BYTES, DUCKDB_THREADS  # noqa: E402
from benchmarks.make_big_export import DEFAULT_BASE, build  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS-analyze.md"

if TYPE_CHECKING:
    from analysis.diagnosis.findings import Finding
    from analysis.diagnosis.rules.base import Rule, RuleResult
    from analysis.model.trace import Run
    from analysis.run.runner import AnalysisContext

THREADS = 2
MEMORY_BYTES = 2 * 1024**3


def _peak_rss() -> int:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) * 1024  # Linux reports KiB


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children (the ingest's child)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def step_ingest(src: Path, out: Path) -> dict:
    from analysis.api import Limits, ingest

    out.unlink(missing_ok=True)
    t0 = time.monotonic()
    result = ingest(src, out, limits=Limits(threads=THREADS, memory_bytes=MEMORY_BYTES, max_bytes=2**62))
    return {"wall_s": time.monotonic() - t0, "cpu_s": _cpu_s(), "peak_rss": _peak_rss(),
            "counts": result.info["counts"]}


def _rules_on(run: Run, ctx: AnalysisContext, rules: list[type[Rule]]) -> tuple[list[Finding], list[RuleResult]]:
    """The rules on ``run`` through the engine loop the runner calls (``analysis.run.runner``), its thresholds
    and window from ``make_context`` (every rule run in place: these reports have no run-level step)."""
    from analysis.diagnosis.rules.base import RuleContext, evaluate

    base = RuleContext(run, all_params=ctx.all_params, window=ctx.spec, claimers=ctx.registry.idle_claimers())
    return evaluate(run, rules, base, ctx.all_params)


def step_analyze(src: Path, out: Path) -> dict:
    from analysis.diagnosis.breakdown import breakdown
    from analysis.diagnosis.launches import launch_summary
    from analysis.diagnosis.rules.nsys import NSYS_RULES
    from analysis.diagnosis.summary import report_info
    from analysis.loops.iterations import iterations
    from analysis.model.nvtx_projection import nvtx_projection
    from analysis.model.trace import Run
    from analysis.run.runner import make_context

    timings: dict[str, float] = {}
    findings: dict[str, int] = {}
    ctx = make_context(window="all")
    t0 = time.monotonic()
    with Run.open([out]) as run:
        trace = run.traces[0]
        # The summaries before the rules, as the runner computes them (the launches' join is DuckDB's largest: run
        # later, beside the owner table's arrays, it raised the peak by 200 MiB at 10M kernels).
        for name, fn in (("report_info", report_info), ("breakdown", breakdown),
                         ("nvtx_projection", nvtx_projection), ("iterations", iterations),
                         ("launches", launch_summary)):
            t = time.monotonic()
            fn(trace)
            timings[name] = time.monotonic() - t
        for rule in [r for r in NSYS_RULES if not r.id.startswith("PHASE")]:  # the rules without the phase rules
            t = time.monotonic()
            found, results = _rules_on(run, ctx, [rule])
            timings[rule.id] = time.monotonic() - t
            if results[0].status == "error":
                raise SystemExit(f"{rule.id} failed: {results[0].reason}")
            findings[rule.id] = sum(f.impact_ns for f in found)
    return {"wall_s": time.monotonic() - t0, "cpu_s": _cpu_s(), "peak_rss": _peak_rss(), "timings": timings,
            "impact_ns": findings}


def step_analyze_steady(src: Path, out: Path) -> dict:
    """What ``goodput analyze`` runs since phases: the report's loop and phases on the whole
    file, then every summary and rule on the steady window (a windowed trace: views clipped to it)."""
    from analysis.diagnosis.breakdown import breakdown
    from analysis.diagnosis.idle_anatomy import idle_anatomy
    from analysis.diagnosis.launches import launch_summary
    from analysis.diagnosis.rules.nsys import NSYS_RULES
    from analysis.diagnosis.summary import report_info
    from analysis.loops.phases import phase_info, phase_of
    from analysis.model.nvtx_projection import nvtx_projection
    from analysis.model.trace import Run
    from analysis.run.runner import make_context

    timings: dict[str, float] = {}
    findings: dict[str, int] = {}
    ctx = make_context()
    t0 = time.monotonic()
    with Run.open([out]) as run:
        whole = run.traces[0]
        t = time.monotonic()
        info = phase_info(whole)
        steady = phase_of(info.phases, "steady")
        timings["phases"] = time.monotonic() - t
        trace = whole.windowed(steady.start_ns, steady.end_ns) if steady else whole
        trace.memo["phase_info"] = info
        wrun = Run([trace])
        t = time.monotonic()
        report_info(whole)
        timings["report_info"] = time.monotonic() - t
        for name, fn in (("breakdown", breakdown), ("nvtx_projection", nvtx_projection), ("launches", launch_summary)):
            t = time.monotonic()
            fn(trace)
            timings[name] = time.monotonic() - t
        for rule in NSYS_RULES:
            t = time.monotonic()
            found, results = _rules_on(wrun, ctx, [rule])
            timings[rule.id] = time.monotonic() - t
            if results[0].status == "error":
                raise SystemExit(f"{rule.id} failed: {results[0].reason}")
            findings[rule.id] = sum(f.impact_ns for f in found)
        t = time.monotonic()  # after the rules, as in the runner: it reuses the gap rules' painting
        idle_anatomy(trace, [(p.name, p.start_ns) for p in info.phases])
        timings["idle_anatomy"] = time.monotonic() - t
        if trace is not whole:
            trace.close()
    return {"wall_s": time.monotonic() - t0, "cpu_s": _cpu_s(), "peak_rss": _peak_rss(), "timings": timings,
            "impact_ns": findings, "iterations": len(info.loop), "source": info.loop.source,
            "phases": [dataclasses.asdict(p) for p in info.phases]}


def step_analyze_steady_noanatomy(src: Path, out: Path) -> dict:
    """``analyze_steady`` with the idle anatomy switched off, patched in this step's process only: no rule owns
    idle by category (the claims paint nothing), the start-up fill is not painted (PHASE001 falls back to its
    top calls) and the report's anatomy is not computed. The baseline the anatomy's cost is measured against
    in the same run (``--steps analyze_steady,analyze_steady_noanatomy``)."""
    import analysis.diagnosis.idle_anatomy as anatomy
    import analysis.diagnosis.rules.nsys.phase as phase
    from analysis.diagnosis.rules.base import Registry

    # The engine passes down no rule that claims idle by category, only the gap table's owners (they claim nothing).
    Registry.idle_claimers = lambda self: tuple(r for r in self if r.gap_role is not None)  # type: ignore[method-assign]
    phase.startup_fill = lambda *a, **k: None
    anatomy.idle_anatomy = lambda *a, **k: []
    return step_analyze_steady(src, out)


STEPS = {"ingest": step_ingest, "analyze": step_analyze, "analyze_steady": step_analyze_steady,
         "analyze_steady_noanatomy": step_analyze_steady_noanatomy}


def _run_step(name: str, src: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--step", name, "--src", str(src), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"step {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(counts: dict, src_bytes: int, ings: list[dict], anas: list[dict], command: str) -> str:
    ing, ana = min(ings, key=lambda r: r["wall_s"]), min(anas, key=lambda r: r["wall_s"])
    ratio = ana["wall_s"] / ing["wall_s"]
    rss_ing, rss_ana = max(r["peak_rss"] for r in ings), max(r["peak_rss"] for r in anas)  # worst round
    rows = sorted(ana["timings"].items(), key=lambda kv: -kv[1])
    lines = [
        f"Export: {src_bytes / 2**30:.2f} GiB, " + ", ".join(f"{k.removeprefix('CUPTI_ACTIVITY_KIND_')} {v:,}"
                                                            for k, v in counts.items()),
        f"Machine: {os.cpu_count()} CPUs (shared with other work; load average {os.getloadavg()[0]:.1f} at the end), "
        f"Python {platform.python_version()}, DuckDB threads={THREADS} (ingest) / {DUCKDB_THREADS} (analysis), analysis "
        f"memory_limit {DUCKDB_MEMORY_BYTES // 2**20} MiB (the defaults of analysis.model.trace).",
        "",
        "| step | wall s | share of ingest (wall) | CPU s | share of ingest (CPU) | peak RSS MiB (worst round) |",
        "|---|---|---|---|---|---|",
        f"| ingest (reference) | {ing['wall_s']:.2f} | 1.00 | {ing['cpu_s']:.2f} | 1.00 | "
        f"{rss_ing / 2**20:,.0f} |",
        f"| analysis: all nsys rules + summaries | {ana['wall_s']:.2f} | {ratio:.3f} | {ana['cpu_s']:.2f} | "
        f"{ana['cpu_s'] / ing['cpu_s']:.3f} | {rss_ana / 2**20:,.0f} |",
        "",
        f"Fastest of {len(ings)} alternating rounds each; every round (wall s / CPU s / peak RSS MiB):",
        "",
        *[f"- round {i + 1}: ingest {a['wall_s']:.2f} / {a['cpu_s']:.2f} / {a['peak_rss'] / 2**20:,.0f}; "
          f"analysis {b['wall_s']:.2f} / {b['cpu_s']:.2f} / {b['peak_rss'] / 2**20:,.0f}"
          for i, (a, b) in enumerate(zip(ings, anas, strict=True))],
        "",
        "Parts of the fastest analysis round:",
        "",
        "| part | wall s |",
        "|---|---|",
        *[f"| {name} | {sec:.2f} |" for name, sec in rows],
        "",
        f"Targets: analysis <= 1/4 of ingest ({'met' if ratio <= 0.25 else 'MISSED'}: {ratio:.3f}); "
        f"peak RSS < 2 GiB ({'met' if rss_ana < 2 * 2**30 else 'MISSED'}: {rss_ana / 2**20:,.0f} MiB).",
        "",
        "Impact found per rule (ns): " + ", ".join(f"{k} {v:,}" for k, v in ana["impact_ns"].items()),
        "",
        f"Command: `{command}`",
        "",
        "Notes: each step runs in its own process on the same export; the ingest is `analysis.api.ingest`",
        "(hardened validation + normalized copy), the analysis is what `goodput analyze` runs per report:",
        "report_info, breakdown, NVTX projection, iterations, then every nsys rule one at a",
        "time. The first rule that needs gap ownership (GPU001) pays for loading the GPU operations, the",
        "sync calls and the copy calls into NumPy and classifying every gap; the others reuse it. The export",
        "replicates the cloverleaf corpus export (one cudaDeviceSynchronize per kernel), so it has 10M sync",
        "calls and 12M gaps, the worst case for gap ownership. This VM's wall and CPU times vary run to run",
        "(memory the guest touches for the first time is slow to fault in), hence the alternating rounds.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="nsys analysis benchmark")
    parser.add_argument("--workdir", type=Path, default=Path("bench-out/analyze"))
    parser.add_argument("--kernels", type=int, default=10_000_000)
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE)
    parser.add_argument("--keep", action="store_true", help="keep the big export and its DuckDB file")
    parser.add_argument("--reuse", action="store_true", help="reuse an existing export in --workdir")
    parser.add_argument("--no-results", action="store_true", help=f"do not rewrite {RESULTS.name}")
    parser.add_argument("--repeat", type=int, default=2, help="alternating ingest/analysis rounds (fastest kept)")
    parser.add_argument("--devices", type=int, default=8,
                        help="also analyze the ingested export with its GPU work dealt over this many devices "
                             "(0: skip)")
    parser.add_argument("--compare", help="comma-separated analysis steps run interleaved on the ingested file "
                                          f"(medians, ratios to the last one; steps: {', '.join(sorted(STEPS))})")
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    parser.add_argument("--src", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(STEPS[args.step](args.src, args.out)))
        return
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    src, out = work / f"big-{args.kernels}.sqlite", work / f"big-{args.kernels}.duckdb"
    if shutil.disk_usage(work).free < args.kernels * 260 * 2:
        raise SystemExit(f"need about {args.kernels * 260 * 2 / 2**30:.1f} GiB free in {work}")
    t0 = time.monotonic()
    if not (args.reuse and src.exists()):
        build(args.base, src, args.kernels)
    print(f"export ready in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    if args.compare:
        try:
            print(_compare(src, out, args.compare.split(","), args.repeat, sys.argv[1:]))
        finally:
            if not args.keep:
                src.unlink(missing_ok=True)
                out.unlink(missing_ok=True)
        return
    try:
        ings, anas, steadies = [], [], []
        for _ in range(args.repeat):
            ings.append(_run_step("ingest", src, out))
            print(f"ingest: {ings[-1]}", file=sys.stderr)
            anas.append(_run_step("analyze", src, out))
            print(f"analyze: {anas[-1]}", file=sys.stderr)
            if anas[-1]["impact_ns"] != anas[0]["impact_ns"]:
                raise SystemExit("the impacts differ between rounds")
            steadies.append(_run_step("analyze_steady", src, out))
            print(f"analyze_steady: {steadies[-1]}", file=sys.stderr)
        spread = None
        if args.devices > 1:
            spread = _spread(out, args.devices)
            multi = _run_step("analyze", src, spread)
            print(f"analyze, {args.devices} devices: {multi}", file=sys.stderr)
        command = "python benchmarks/analyze.py " + " ".join(
            a for a in sys.argv[1:] if a not in ("--keep", "--reuse"))
        text = report(ings[0]["counts"], src.stat().st_size, ings, anas, command.strip())
        if spread is not None:
            text += _multi_text(args.devices, multi, min(r["wall_s"] for r in ings))
        text += _steady_text(anas, steadies)
        print(text)
        if not args.no_results:
            RESULTS.write_text("# Analysis benchmark (nsys)\n\n" + text)
    finally:
        if not args.keep:
            src.unlink(missing_ok=True)
            out.unlink(missing_ok=True)
        (work / f"spread-{args.kernels}.duckdb").unlink(missing_ok=True)


def _compare(src: Path, out: Path, steps: list[str], repeat: int, argv: list[str]) -> str:
    """Run ``steps`` on the ingested file, interleaved (step 1, step 2, ..., then again) for ``repeat`` rounds;
    medians per step and ratios to the last step (the baseline, measured in the same run)."""
    import statistics

    bad = [s for s in steps if s not in STEPS or s == "ingest"]
    if bad:
        raise SystemExit(f"not analysis steps: {', '.join(bad)}")
    if not out.exists():
        _run_step("ingest", src, out)
    rounds: dict[str, list[dict]] = {s: [] for s in steps}
    loads = [os.getloadavg()[0]]
    for _ in range(repeat):
        for name in steps:
            rounds[name].append(_run_step(name, src, out))
            print(f"{name}: wall {rounds[name][-1]['wall_s']:.2f} s, CPU {rounds[name][-1]['cpu_s']:.2f} s, "
                  f"peak RSS {rounds[name][-1]['peak_rss'] / 2**20:,.0f} MiB", file=sys.stderr)
        loads.append(os.getloadavg()[0])
    first = rounds[steps[0]][0]["impact_ns"]
    if any(r["impact_ns"] != first for name in steps if "noanatomy" not in name for r in rounds[name]):
        raise SystemExit("the impacts differ between rounds")

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[name])

    base = steps[-1]
    lines = [
        f"{len(steps)} steps interleaved, {repeat} rounds on {out.name}; {os.cpu_count()} CPUs, load average "
        f"{min(loads):.1f}-{max(loads):.1f} (1 min, sampled between rounds).",
        "",
        "| step | CPU s (rounds) | median CPU s | median wall s | peak RSS MiB (rounds) | median peak RSS MiB | "
        f"CPU vs {base} | peak RSS vs {base} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in steps:
        cpu, rss = med(name, "cpu_s"), med(name, "peak_rss")
        cpus = ", ".join(f"{r['cpu_s']:.2f}" for r in rounds[name])
        rsss = ", ".join(f"{r['peak_rss'] / 2**20:,.0f}" for r in rounds[name])
        lines.append(
            f"| {name} | {cpus} | {cpu:.2f} | {med(name, 'wall_s'):.2f} | {rsss} | {rss / 2**20:,.0f} | "
            f"{cpu / med(base, 'cpu_s') - 1:+.1%} | {rss / med(base, 'peak_rss') - 1:+.1%} |")
    parts = sorted({k for name in steps for r in rounds[name] for k in r["timings"]},
                   key=lambda k: -statistics.median(r["timings"].get(k, 0.0) for r in rounds[steps[0]]))[:8]
    lines += ["", "Median wall s of the slowest parts: " + "; ".join(
        f"{k} " + " / ".join(f"{statistics.median(r['timings'].get(k, 0.0) for r in rounds[n]):.2f}" for n in steps)
        for k in parts) + f" ({' / '.join(steps)}).", "",
        f"Command: `python benchmarks/analyze.py {' '.join(a for a in argv if a not in ('--keep', '--reuse'))}`", ""]
    return "\n".join(lines)


def _spread(out: Path, devices: int) -> Path:
    """A copy of the ingested file with kernels and copies dealt round-robin over ``devices`` GPUs of the
    same process: every device idles while the others run, so there are many long gaps on each (the
    case where the gap causes, a range problem over gaps x API calls, cost the most)."""
    import duckdb

    spread = out.with_name(out.name.replace("big-", "spread-"))
    shutil.copyfile(out, spread)
    con = duckdb.connect(str(spread))
    try:
        for table in ("kernels", "memcpy"):
            con.execute(f"UPDATE {table} SET device = CAST(rowid % {int(devices)} AS INTEGER)")  # noqa: S608
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return spread


def _steady_text(anas: list[dict], steadies: list[dict]) -> str:
    """Phases + steady-window analysis against the whole-file analysis of the same rounds."""
    a, s = min(anas, key=lambda r: r["wall_s"]), min(steadies, key=lambda r: r["wall_s"])
    return "\n".join([
        "",
        f"With phases: loop from {s['source']}, {s['iterations']:,} iterations, phases "
        + ", ".join(f"{p['name']} {(p['end_ns'] - p['start_ns']) / 1e9:.3f} s" for p in s["phases"]) + ".",
        f"analysis with phases + steady window {s['wall_s']:.2f} s wall / {s['cpu_s']:.2f} s CPU against "
        f"{a['wall_s']:.2f} s / {a['cpu_s']:.2f} s on the whole file as before ({s['wall_s'] / a['wall_s'] - 1:+.1%} "
        f"wall); phases and iteration detection {s['timings']['phases']:.2f} s.",
        "",
    ])


def _multi_text(devices: int, multi: dict, ingest_s: float) -> str:
    parts = sorted(multi["timings"].items(), key=lambda kv: -kv[1])[:4]
    return "\n".join([
        "",
        f"Same export with its GPU work dealt round-robin over {devices} devices of the process (every device",
        "idles while the others run: many more idle gaps of at least 1 ms, the worst case for GPU001's causes):",
        f"analysis {multi['wall_s']:.2f} s wall / {multi['cpu_s']:.2f} s CPU ({multi['wall_s'] / ingest_s:.3f} of the "
        f"fastest ingest above), peak RSS {multi['peak_rss'] / 2**20:,.0f} MiB; slowest parts: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in parts) + ".",
        "",
    ])


if __name__ == "__main__":
    main()
