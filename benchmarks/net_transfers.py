"""What deriving ``net_transfers`` (NCCL's network transfers from its ncclNet* NVTX events) adds to an ingest.

Builds the ingest benchmark's export (``make_big_export.py``: a real corpus export replicated to N kernels),
then ingests it alternately with and without the step (``analysis.readers.nsys.ingest._net`` replaced by a no-op in
that process), each ingest in its own process, and compares the medians. Also times the step alone on the
normalized file.

    .venv/bin/python benchmarks/net_transfers.py --kernels 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.make_big_export import DEFAULT_BASE, build  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS-net-transfers.md"

CHILD = """
import sys, time
from pathlib import Path
import analysis.readers.nsys.ingest as ing
from analysis.api import Limits, ingest
if sys.argv[3] == "without":
    ing._net = lambda tmp, limits: None
out = Path(sys.argv[2]); out.unlink(missing_ok=True)
t = time.perf_counter()
ingest(Path(sys.argv[1]), out, limits=Limits(timeout_s=3600))
print(time.perf_counter() - t)
"""


def _ingest(src: Path, out: Path, mode: str) -> float:
    r = subprocess.run([sys.executable, "-c", CHILD, str(src), str(out), mode], capture_output=True, text=True,
                       check=True, cwd=ROOT)
    return float(r.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", type=Path, default=Path("bench-out"))
    p.add_argument("--kernels", type=int, default=10_000_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    src = args.workdir / f"big-{args.kernels}.sqlite"
    if not src.exists():
        build(DEFAULT_BASE, src, args.kernels)
    out = args.workdir / "net.duckdb"
    times: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(args.repeat):
        for mode in ("without", "with"):  # interleaved: the load drifts alike on both
            times[mode].append(_ingest(src, out, mode))
    from analysis.readers.nsys.net import write_net_file

    t = time.perf_counter()
    rows = write_net_file(out, 2 * 1024**3)
    alone = time.perf_counter() - t
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = 100.0 * (med["with"] - med["without"]) / med["without"]
    load = os.getloadavg()[0]
    text = (f"# net_transfers at ingest\n\n`python benchmarks/net_transfers.py --kernels {args.kernels} "
            f"--repeat {args.repeat}` ({time.strftime('%Y-%m-%d %H:%M')} UTC, load average {load:.1f} on "
            f"{os.cpu_count()} CPUs)\n\n| ingest | runs (s) | median |\n|---|---|---|\n"
            + "".join(f"| {k} the step | {', '.join(f'{x:.2f}' for x in v)} | {med[k]:.2f} s |\n" for k, v in times.items())
            + f"\nThe step adds {extra:+.1f} % to the median ingest (target at most +5 %); alone on the normalized "
            f"file it takes {alone * 1000:.0f} ms ({rows} transfers).\n")
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
