"""Planted variants of corpus exports for `goodput diff` tests, with their expected numbers from the raw
export (plain sqlite3, independently of Goodput's reader): a slowed kernel and an added gap."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.analysis.planting import copy_export, open_gap, raw_gaps, time_tables
from tests.conftest import ROOT


def goodput(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The CLI as a user runs it (a fresh interpreter), from the repository root."""
    return subprocess.run([sys.executable, "-c", "import sys; from goodput_cli.main import main; sys.exit(main())",
                           *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def kernel_totals_raw(path: Path) -> dict[str, tuple[int, int]]:
    """name (demangled) -> (total ns, launches), straight from CUPTI_ACTIVITY_KIND_KERNEL."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute('SELECT s.value, SUM(k."end" - k.start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
                           "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value").fetchall()
    finally:
        con.close()
    return {name: (int(total), int(n)) for name, total, n in rows}


def slow_kernel(src: Path, dst: Path, *, share: float = 0.5) -> tuple[str, int]:
    """Copy ``src`` with its costliest kernel (by total time) made ``share`` longer in every launch.

    Returns (kernel name, ns added in all). Only the kernel's own end times move: other kernels keep
    their times, so their totals are unchanged and must not show up in the diff.
    """
    totals = kernel_totals_raw(src)
    name = max(totals, key=lambda n: (totals[n][0], n))
    copy_export(src, dst)
    con = sqlite3.connect(dst)
    with con:
        (sid,) = con.execute("SELECT id FROM StringIds WHERE value = ?", [name]).fetchone()
        rows = con.execute('SELECT rowid, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName = ?',
                           [sid]).fetchall()
        added = 0
        for rowid, dur in rows:
            extra = int(dur * share)
            added += extra
            con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + ? WHERE rowid = ?', [extra, rowid])
    con.close()
    return name, added


def add_gap(src: Path, dst: Path, delta_ns: int) -> tuple[int, int]:
    """Copy ``src`` with its longest GPU gap ``delta_ns`` longer (everything after it later by that much).

    Returns (pid, device) of the gap's GPU. Each device's span and idle time grow by ``delta_ns`` on that
    GPU; no kernel, copy or set changes its duration.
    """
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        gaps = raw_gaps(con)
    finally:
        con.close()
    pid, dev, start, end = max(gaps, key=lambda g: (g[3] - g[2], g))
    copy_export(src, dst)
    open_gap(dst, (start + end) // 2, delta_ns)
    return pid, dev


def crop_after(src: Path, dst: Path, at: int) -> int:
    """Copy ``src`` with every timed row (GPU and host) that starts at or after ``at`` deleted: a capture of
    the same job that stopped earlier. Returns the rows deleted."""
    copy_export(src, dst)
    con = sqlite3.connect(dst)
    deleted = 0
    with con:
        for table in time_tables(con):
            deleted += con.execute(f'DELETE FROM "{table}" WHERE start >= ?', [at]).rowcount  # noqa: S608
    con.close()
    return deleted


def scale_kernel(src: Path, dst: Path, name: str, factor: float) -> int:
    """Copy ``src`` with every launch of the kernel ``name`` (demangled) ``factor`` times as long (its end
    moves; nothing else does). Returns the launches scaled."""
    copy_export(src, dst)
    con = sqlite3.connect(dst)
    with con:
        n = con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + CAST(ROUND(("end" - start) * ?) AS INTEGER) '
                        "WHERE demangledName IN (SELECT id FROM StringIds WHERE value = ?)", [factor, name]).rowcount
    con.close()
    return n


def launch_durations_raw(path: Path, name: str, lo: int, hi: int) -> list[int]:
    """Durations of the kernel ``name``'s launches that start in [lo, hi), straight from the export."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute('SELECT k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s '
                           "ON s.id = k.demangledName WHERE s.value = ? AND k.start >= ? AND k.start < ?",
                           [name, lo, hi]).fetchall()
    finally:
        con.close()
    return [int(d) for (d,) in rows]
