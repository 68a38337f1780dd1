"""`goodput analyze --format json` on the small corpus exports, this checkout against a base tree, interleaved.

Each round runs every export once with the base tree's code and once with this checkout's (the order alternates
from round to round), and records the wall time and the CPU time of the whole process tree (the command and its
ingest child: ``RUSAGE_CHILDREN``). CPU time hardly moves with the machine's load, so on a shared machine it is
the steadier figure; wall time is what a person waits for. Medians are printed per export and over all of
them, and the two trees' JSON outputs are compared byte for byte (a difference fails the benchmark).

    .venv/bin/python benchmarks/cli.py                         # base: the `main` branch (git archive)
    .venv/bin/python benchmarks/cli.py --base /path/to/tree    # base: a source tree (a clean checkout)
    .venv/bin/python benchmarks/cli.py --rounds 3 --files 6    # a quick look: the 6 smallest exports

On a machine shared with other work, ``--fifo`` runs each command (and its ingest child) under the real-time
scheduling class SCHED_FIFO, ahead of every ordinary process, with a pause between commands so that the
kernel's real-time throttling (95 % of each second) never cuts in: the wall time it measures is close to a quiet
machine's (it needs the privilege to set that class, and it delays the machine's other work while it runs).

    .venv/bin/python benchmarks/cli.py --base /path/to/tree --rounds 5 --fifo

Bytecode is cached under a temporary folder for both trees (``PYTHONPYCACHEPREFIX``; an installed package
has its ``.pyc`` files too) and each tree runs once before the timed rounds, so neither pays for compiling.
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
SMALL = 5 * 2**20
CLI = "import sys; from goodput_cli.main import main; sys.exit(main())"


def tree_of(base: str, into: Path) -> Path:
    """``base`` when it is a folder, else the tracked files of that git revision extracted under ``into``."""
    if Path(base).is_dir():
        return Path(base).resolve()
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "src.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", base], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    for so in (ROOT / "analysis" / "diagnosis").glob("_sweep*.so"):  # the compiled pass (not tracked)
        target = into / "analysis" / "diagnosis" / so.name
        if not target.exists():
            target.write_bytes(so.read_bytes())
    return into


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # finished descendants: the CLI and its ingest child
    return ru.ru_utime + ru.ru_stime


FIFO_PRIORITY = 10
FIFO_PAUSE_S = 0.5


def _fifo() -> None:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))


def run_once(code: Path, src: Path, pycache: Path, fifo: bool = False) -> tuple[float, float, bytes]:
    """(wall s, CPU s, stdout) of ``goodput analyze --format json --quiet src`` with the code of ``code``;
    ``fifo``: under SCHED_FIFO (see the module's docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if fifo:
        time.sleep(FIFO_PAUSE_S)
    c0, t0 = _cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CLI, "analyze", "--format", "json", "--quiet", str(src)],
                          env=env, cwd=code, capture_output=True, timeout=600, preexec_fn=_fifo if fifo else None)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"analyze {src.name} failed ({proc.returncode}) with {code}: {proc.stderr[-2000:]!r}")
    return wall, cpu, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="a source tree or a git revision (default: main)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over all exports (default 5)")
    parser.add_argument("--files", type=int, default=0, help="only the N smallest exports (0: every export < 5 MB)")
    parser.add_argument("--allow-different", action="store_true",
                        help="time trees whose outputs differ (a base with other changes): say so instead of failing")
    parser.add_argument("--fifo", action="store_true",
                        help="run each command under SCHED_FIFO: about a quiet machine's wall time on a shared one")
    args = parser.parse_args()
    files = sorted((p for p in CORPUS.glob("*.sqlite") if p.stat().st_size < SMALL), key=lambda p: p.stat().st_size)
    files = files[: args.files] if args.files else files
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
          + (" (timed commands under SCHED_FIFO)" if args.fifo else ""))
    with tempfile.TemporaryDirectory(prefix="goodput-cli-bench-") as tmp:
        trees = {"base": tree_of(args.base, Path(tmp) / "base"), "new": ROOT}
        caches = {name: Path(tmp) / f"pycache-{name}" for name in trees}
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for name, code in trees.items():  # compile once, and check the outputs are the same
            outs = {src.name: run_once(code, src, caches[name])[2] for src in files}
            if name == "base":
                expected = outs
            else:
                differ = [n for n in outs if outs[n] != expected[n]]
                if differ and not args.allow_different:
                    raise SystemExit(f"the JSON outputs differ on {differ}")
        print(f"{len(files)} exports: the JSON outputs differ on {len(differ)} of them" if differ else
              f"{len(files)} exports: the JSON outputs of both trees are byte-identical")
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for src in files:
                for name, code in order:
                    wall, cpu, _ = run_once(code, src, caches[name], args.fifo)
                    times.setdefault((name, src.name), []).append((wall, cpu))
            print(f"round {r + 1} done, load {os.getloadavg()[0]:.2f}", flush=True)
    print()
    print("| export | MiB | base wall s | base CPU s | new wall s | new CPU s |")
    print("|---|---|---|---|---|---|")
    med: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for src in files:
        cells = []
        for name in trees:
            w = statistics.median(t[0] for t in times[(name, src.name)])
            c = statistics.median(t[1] for t in times[(name, src.name)])
            med[name].append((w, c))
            cells += [f"{w:.3f}", f"{c:.3f}"]
        print(f"| {src.name} | {src.stat().st_size / 2**20:.1f} | " + " | ".join(cells) + " |")
    cells = []
    for name in trees:
        cells += [f"**{statistics.median(w for w, _ in med[name]):.3f}**",
                  f"**{statistics.median(c for _, c in med[name]):.3f}**"]
    print(f"| median of the {len(files)} medians | | " + " | ".join(cells) + " |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
