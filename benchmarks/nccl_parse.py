"""How fast an NCCL debug log parses, and in how much memory (issue #44: 100 MB in under 5 s on one core).

Builds logs of the given size from the real corpus lines (``../shared/corpus/nccl``) in two mixes and parses
each in a fresh child process (one thread), reporting CPU seconds, wall seconds and the child's peak RSS:

* ``corpus``: the 16 corpus logs concatenated, repeated (mostly COLL trace lines, as real big logs are);
* ``init``: only their INIT/GRAPH/NET/ENV lines (channels, rings, trees, NICs, GDR: the costliest grammar),
  repeated; and ``ingest``: the ``corpus`` log through the whole ingest (parse + DuckDB file).

    .venv/bin/python benchmarks/nccl_parse.py --mb 100 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "nccl"

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from analysis.readers.nccl import ingest, parse_file
src, mode = Path(sys.argv[1]), sys.argv[2]
cpu, wall = time.process_time(), time.perf_counter()
if mode == "ingest":
    ingest(src, Path(sys.argv[3]))
    lines = None
else:
    lines = parse_file(src).lines
print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "lines": lines,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build(out: Path, megabytes: int, mix: str) -> int:
    logs = sorted(CORPUS.glob("*.log"))
    if mix == "init":
        keep = (b" via ", b"Channel ", b"Trees", b"Tree ", b"NET/", b"GPU Direct", b"set by environment",
                b"ncclCommInitRank", b"Init COMPLETE", b"Pattern ", b"Ring ")
        data = b"".join(line for p in logs for line in p.read_bytes().splitlines(keepends=True)
                        if any(k in line for k in keep))
    else:
        data = b"".join(p.read_bytes() for p in logs)
    target = megabytes * 2**20
    with out.open("wb") as fh:
        written = 0
        while written < target:
            fh.write(data)
            written += len(data)
    return out.stat().st_size


def child(src: Path, mode: str, work: Path) -> dict:
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", CHILD, str(src), mode,
                           str(work / "out.duckdb")], capture_output=True, text=True, env=env, check=True)
    (work / "out.duckdb").unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nccl-bench-") as tmp:
        work = Path(tmp)
        print(f"| log | mode | size MiB | lines | CPU s (median of {args.repeat}) | wall s | peak RSS MiB |")
        print("|---|---|---|---|---|---|---|")
        for mix, mode in (("corpus", "parse"), ("init", "parse"), ("corpus", "ingest")):
            src = work / f"{mix}.log"
            if not src.exists():
                build(src, args.mb, mix)
            runs = [child(src, mode, work) for _ in range(args.repeat)]
            cpu = statistics.median(r["cpu_s"] for r in runs)
            wall = statistics.median(r["wall_s"] for r in runs)
            rss = max(r["peak_rss_mib"] for r in runs)
            lines = runs[0]["lines"]
            print(f"| {mix} | {mode} | {src.stat().st_size / 2**20:.0f} | {lines if lines is not None else '-'} | "
                  f"{cpu:.2f} | {wall:.2f} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
