#!/usr/bin/env bash
# Interleave the analysis benchmark's steps of several source trees (git worktrees of other commits) on one
# ingested export, round after round, with this checkout's virtualenv; one line per step and round:
# round, name, CPU s, wall s, peak RSS MiB, load average.
#
#   git worktree add /tmp/before REV
#   benchmarks/interleave_trees.sh 3 /tmp/da_bench10/big-10000000.sqlite /tmp/da_bench10/big-10000000.duckdb \
#       before=/tmp/before:analyze_steady now=.:analyze_steady off=.:analyze_steady_noanatomy
#
# A tree's own benchmarks/analyze.py runs with PYTHONPATH set to that tree. Medians are left to the reader.
# A tree that cannot read the ingested file's schema version analyzes its own ingest: name=TREE:STEP:OTHER.duckdb
# (make it with that tree's `benchmarks/analyze.py --step ingest --src BIG.sqlite --out OTHER.duckdb`).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
rounds=$1 src=$2 out=$3
shift 3
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    name=${spec%%=*} rest=${spec#*=}
    IFS=: read -r tdir step own <<< "$rest"
    tree=$(cd "$tdir" && pwd) db=${own:-$out}
    res=$(cd "$tree" && PYTHONPATH="$tree" "$here/.venv/bin/python" benchmarks/analyze.py --step "$step" \
          --src "$src" --out "$db" 2>/dev/null | tail -1)
    echo "$r $name $(echo "$res" | "$here/.venv/bin/python" -c 'import json, sys
d = json.loads(sys.stdin.read())
print(round(d["cpu_s"], 2), round(d["wall_s"], 2), d["peak_rss"] >> 20)') load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
