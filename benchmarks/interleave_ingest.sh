#!/usr/bin/env bash
# Interleave the whole nsys ingest of several source trees with DuckDB's raw sqlite-scanner copy of the same
# tables, on one export, round after round; each step in its own process under SCHED_RR (`chrt -r 10`, 2 s
# apart, so neighbours on a shared machine do not set the wall time), with this checkout's virtualenv. One line
# per step and round: round, name, load, then benchmarks/ingest.py's JSON (wall_s, cpu_s, peak_rss, ...).
#
#   git worktree add /tmp/before REV
#   benchmarks/interleave_ingest.sh 5 big-2000000.sqlite raw=.:baseline before=/tmp/before:ours now=.:ours
#
# Build the export with benchmarks/make_big_export.py. Medians are left to the reader.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
rounds=$1 src=$(realpath "$2")
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    name=${spec%%=*} rest=${spec#*=}
    tree=$(cd "${rest%%:*}" && pwd) step=${rest##*:}
    sleep 2
    mkdir -p "$work/$name"
    load=$(cut -d' ' -f1 /proc/loadavg)
    res=$(cd "$tree" && PYTHONPATH="$tree" chrt -r 10 "$here/.venv/bin/python" benchmarks/ingest.py --step "$step" \
          --src "$src" --workdir "$work/$name" 2>/dev/null | tail -1)
    echo "$r $name load=$load $res"
  done
done
