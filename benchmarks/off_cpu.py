"""What reading the scheduler's events (SCHED_EVENTS -> the ``off_cpu`` table) adds to an ingest.

Builds an export with N scheduler events (a real corpus export whose SCHED_EVENTS rows are replicated, times
shifted by one span per copy, in SQLite itself) and the same export without the table, ingests them alternately
and compares the medians. Also times the ``off_cpu`` statement alone against the baseline of copying the raw
table (``CREATE TABLE AS SELECT *`` through the same sqlite_scanner, same threads).

    .venv/bin/python benchmarks/off_cpu.py --events 5000000 --repeat 3
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.make_big_export import DEFAULT_BASE  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS-off-cpu.md"


def build(base: Path, out: Path, events: int) -> int:
    """Write ``out`` with about ``events`` SCHED_EVENTS rows; returns the row count."""
    shutil.copyfile(base, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        n0, lo, hi = con.execute("SELECT count(*), min(start), max(start) FROM SCHED_EVENTS").fetchone()
        copies = max(1, events // n0)
        con.execute(f"""
            INSERT INTO SCHED_EVENTS SELECT start + c.i * {hi - lo + 1}, cpu, isSchedIn, globalTid, threadState,
                                            threadBlock
            FROM SCHED_EVENTS, (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < {copies - 1})
                                SELECT i FROM r) c""")  # noqa: S608 - integers
        con.commit()
        return int(con.execute("SELECT count(*) FROM SCHED_EVENTS").fetchone()[0])
    finally:
        con.close()


def statement_alone(src: Path, work: Path) -> tuple[float, float, int]:
    """(s for the off_cpu statement, s for copying the raw table, rows written) in one DuckDB connection."""
    import duckdb

    from analysis.readers.nsys.child import extension_path
    from analysis.readers.nsys.guard import validate
    from analysis.readers.nsys.normalize import _off_cpu
    from analysis.readers.schema import NSYS_TABLES, ddl

    info = validate(src, max_bytes=1 << 40, timeout_s=600)
    path = work / "alone.duckdb"
    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path), config={"threads": 2, "autoinstall_known_extensions": False,
                                            "autoload_known_extensions": False})
    try:
        con.execute(f"LOAD '{extension_path(duckdb.__version__)}'")
        con.execute(f"ATTACH '{src}' AS src (TYPE sqlite, READ_ONLY)")
        con.execute(ddl({"off_cpu": NSYS_TABLES["off_cpu"]})[0])
        t = time.perf_counter()
        con.execute(_off_cpu(info))
        ours = time.perf_counter() - t
        t = time.perf_counter()
        con.execute('CREATE TABLE raw AS SELECT * FROM src."SCHED_EVENTS"')
        base = time.perf_counter() - t
        rows = int(con.execute("SELECT count(*) FROM off_cpu").fetchone()[0])
    finally:
        con.close()
        path.unlink(missing_ok=True)
    return ours, base, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE)
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench-out")
    args = parser.parse_args()
    from analysis.api import ingest

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    with_events, without = work / "sched.sqlite", work / "no-sched.sqlite"
    rows = build(args.base, with_events, args.events)
    shutil.copyfile(with_events, without)
    con = sqlite3.connect(without)
    con.execute("DROP TABLE SCHED_EVENTS")
    con.commit()
    con.close()
    times: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(args.repeat):
        for key, src in (("without", without), ("with", with_events)):
            out = work / f"{key}.duckdb"
            out.unlink(missing_ok=True)
            t = time.perf_counter()
            ingest(src, out)
            times[key].append(time.perf_counter() - t)
            out.unlink(missing_ok=True)
    ours, base, written = statement_alone(with_events, work)
    med = {k: statistics.median(v) for k, v in times.items()}
    text = f"""# Ingest cost of the scheduler's events (off_cpu)

Export: `{args.base.name}` with its SCHED_EVENTS replicated to {rows:,} rows ({written:,} off-CPU stretches).

| ingest | median s | runs (s) |
|---|---|---|
| without SCHED_EVENTS | {med['without']:.2f} | {', '.join(f'{x:.2f}' for x in times['without'])} |
| with SCHED_EVENTS | {med['with']:.2f} | {', '.join(f'{x:.2f}' for x in times['with'])} |

The off_cpu statement alone: {ours:.2f} s; copying the raw table (`CREATE TABLE AS SELECT *`, same scanner and
threads): {base:.2f} s ({ours / base:.2f}x).

Command: `python benchmarks/off_cpu.py --events {args.events} --repeat {args.repeat}`
"""
    RESULTS.write_text(text)
    print(text)
    for p in (with_events, without):
        p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
