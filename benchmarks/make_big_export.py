"""Build a large nsys export by replicating a real corpus export N times inside SQLite itself.

Every activity table the ingest reads in bulk (kernels, CUDA API calls, memcpy, memset, synchronization)
is repeated with its rows shifted by one session span per copy and its correlation ids shifted by a
stride larger than any id in the file, so each copy's kernels still join to their own launching calls
on (pid, correlationId). String ids, devices and metadata stay those of the original. Rows are appended
with ``INSERT ... SELECT`` over a recursive CTE (no per-row Python).

    .venv/bin/python benchmarks/make_big_export.py --kernels 10000000 --out bench-out/big.sqlite
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASE = ROOT.parent / "shared" / "corpus" / "nsys" / "hpcgroup__pipit__cloverleaf-devsync.sqlite"
REPLICATED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def build(base: Path, out: Path, kernels: int) -> dict[str, int]:
    """Write ``out`` with at least ``kernels`` kernel rows; returns the row count per replicated table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(base, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -262144")  # 256 MiB
    present = [t for t in REPLICATED
               if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()]
    base_rows = {t: con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0 for t in present}  # noqa: S608
    if not base_rows.get("CUPTI_ACTIVITY_KIND_KERNEL"):
        raise SystemExit(f"{base} has no kernels to replicate")
    lo = min(con.execute(f'SELECT min(start) FROM "{t}"').fetchone()[0] for t in present)  # noqa: S608
    hi = max(con.execute(f'SELECT max("end") FROM "{t}"').fetchone()[0] for t in present)  # noqa: S608
    span = hi - lo + 1000
    stride = 1 + max(con.execute(f'SELECT max(correlationId) FROM "{t}"').fetchone()[0] or 0  # noqa: S608
                     for t in present)
    copies = math.ceil(kernels / base_rows["CUPTI_ACTIVITY_KIND_KERNEL"])
    for table in present:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f'"{c}" + n.i * {span}')
            elif c == "correlationId":
                exprs.append(f'"{c}" + n.i * {stride}')
            else:
                exprs.append(f'"{c}"')
        col_list = ", ".join(f'"{c}"' for c in cols)
        t0 = time.monotonic()
        con.execute(f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {copies - 1})
            INSERT INTO "{table}" ({col_list})
            SELECT {", ".join(exprs)} FROM n CROSS JOIN (SELECT * FROM "{table}" WHERE rowid <= {base_rows[table]}) b
        """)  # noqa: S608 - names from the file's own schema, numbers computed here
        con.commit()
        print(f"  {table}: x{copies} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in present}  # noqa: S608
    con.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE)
    parser.add_argument("--kernels", type=int, default=10_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "big.sqlite")
    args = parser.parse_args()
    print(build(args.base, args.out, args.kernels))


if __name__ == "__main__":
    main()
