"""How fast an NCCL debug log parses, and in how much memory (issue #44: 100 MB in under 5 s on one core).

Builds logs of the given size from the real corpus lines (``../shared/corpus/nccl``) in two mixes and parses
each in a fresh child process (one thread), reporting CPU seconds, wall seconds and the child's peak RSS:

* ``corpus``: the 16 corpus logs concatenated, repeated (mostly COLL trace lines, as real big logs are);
* ``init``: only their INIT/GRAPH/NET/ENV lines (channels, rings, trees, NICs, GDR: the costliest grammar),
  repeated; and ``ingest``: the ``corpus`` log through the whole ingest (parse + DuckDB file).

    .venv/bin/python benchmarks/nccl_parse.py --mb 100 --repeat 3

``--merge N`` instead times the run step's merge of one job written as N per-rank files (``NCCL_DEBUG_FILE=%h.%p``):
each file is one of the real p5 2x8 log's per-process outputs (175 lines, NCCL 2.22, 16 channels, EFA) with its
host, pid and rank numbers moved to rank R of an N/8-node x 8-GPU job. The files are ingested once; then each round
runs ``analyze_logs`` on them in a fresh child process (one core), alternating this tree and each ``--base`` tree
(the code before a change, e.g. ``git archive REV analysis | tar -x -C /tmp/base``), and prints every round and
the medians:

    .venv/bin/python benchmarks/nccl_parse.py --merge 1024 --rounds 5 --base /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


P5 = "KeitaW__p5-nccl-test-2024-07-19__p5-2x8-h100-efa-nvls-allreduce-2.22.log"
_CONN = re.compile(r"(\d+)\[(\w+)\]")
_TREE_NUM = re.compile(r"(?<![\d\[-])(\d+)(?![\d\]])")


def per_rank_files(out: Path, nranks: int) -> list[Path]:
    """One job of ``nranks`` ranks (8 per node) as per-rank NCCL_DEBUG_FILE logs, each a real per-process output
    of the p5 log's second node with host, pid and ranks moved (its ranks 8-15 are this node's, 0-7 the next's)."""
    procs: dict[str, list[str]] = {}
    for line in (CORPUS / P5).read_text().splitlines(keepends=True):
        line = line.split(">:", 1)[1] if line.startswith("[1,") else line
        if line.startswith("test-nccl-worker-1:"):
            procs.setdefault(line.split(":")[1], []).append(line)
    templates: dict[int, list[str]] = {}
    for lines in procs.values():
        init = next(x for x in lines if " Init START" in x)
        templates[int(init.split(" rank ")[1].split()[0]) - 8] = lines
    nodes = nranks // 8
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(nodes):
        def mapped(r: int, n: int = n) -> int:
            return 8 * n + r - 8 if r >= 8 else 8 * ((n + 1) % nodes) + r
        for local in range(8):
            rank, pid = 8 * n + local, 10_000 + 8 * n + local
            text = []
            for line in templates[local]:
                _host, _pid, rest = line.split(":", 2)
                rest = rest.replace(" nranks 16", f" nranks {nranks}").replace(" nRanks 16", f" nRanks {nranks}")
                rest = rest.replace(" nNodes 2", f" nNodes {nodes}").replace(f" rank {local + 8} ", f" rank {rank} ")
                if " via " in rest:
                    rest = _CONN.sub(lambda m: f"{mapped(int(m.group(1)))}[{m.group(2)}]", rest)
                elif "Trees [" in rest:
                    head, tail = rest.split("Trees", 1)
                    rest = head + "Trees" + _TREE_NUM.sub(lambda m: str(mapped(int(m.group(1)))), tail)
                text.append(f"node{n:03d}:{pid}:{rest}")
            p = out / f"node{n:03d}.{pid}.log"
            p.write_text("".join(text))
            paths.append(p)
    return paths


MERGE_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from analysis.run.nccl_step import analyze_logs
files = [(Path(p), Path(p).name) for p in Path(sys.argv[1]).read_text().split()]
cpu, wall = time.process_time(), time.perf_counter()
res = analyze_logs(files, "all")
path = res[0].info["network_path"]
print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                  "ranks": len(path["ranks"]), "pairs": len(path["pairs"]), "merged": len(path.get("files") or [1]),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def merge_bench(nranks: int, rounds: int, bases: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    from analysis.readers.nccl import ingest

    trees = [("now", ROOT)] + [(f"base{i}" if len(bases) > 1 else "base", Path(b).resolve())
                               for i, b in enumerate(bases)]
    with tempfile.TemporaryDirectory(prefix="nccl-merge-") as tmp:
        work = Path(tmp)
        logs = per_rank_files(work / "logs", nranks)
        stores = []
        for p in logs:
            ingest(p, p.with_suffix(".duckdb"))
            stores.append(str(p.with_suffix(".duckdb")))
        size = sum(p.stat().st_size for p in logs)
        listing = work / "files.txt"
        listing.write_text("\n".join(stores))
        print(f"{len(logs)} per-rank files, {size / len(logs) / 1024:.1f} KiB and "
              f"{sum(1 for p in logs[:1] for _ in p.open())} lines each; rounds interleaved:")
        results: dict[str, list[dict]] = {name: [] for name, _ in trees}
        for r in range(rounds):
            for name, tree in trees:
                env = {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", MERGE_CHILD, str(listing)],
                                      capture_output=True, text=True, env=env, check=True, cwd=tree)
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                results[name].append(res)
                print(f"round {r + 1} {name}: CPU {res['cpu_s']:.2f} s, wall {res['wall_s']:.2f} s, peak "
                      f"{res['peak_rss_mib']:.0f} MiB, {res['ranks']} ranks, {res['pairs']} pairs, "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"| tree | files | CPU s (median of {rounds}) | wall s | peak RSS MiB |")
        print("|---|---|---|---|---|")
        for name, _ in trees:
            runs = results[name]
            print(f"| {name} | {len(logs)} | {statistics.median(x['cpu_s'] for x in runs):.2f} | "
                  f"{statistics.median(x['wall_s'] for x in runs):.2f} | "
                  f"{max(x['peak_rss_mib'] for x in runs):.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--merge", type=int, default=0, help="time the merge of a job of this many per-rank files")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", action="append", default=[], help="another source tree to time alongside")
    args = ap.parse_args()
    if args.merge:
        merge_bench(args.merge, args.rounds, args.base)
        return
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
