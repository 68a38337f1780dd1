"""A many-rank run built at test time from the corpus' two-rank NCCL exports.

Rank ``k`` is a copy of ``nccl-ring-2node-r0`` (even k) or ``-r1`` (odd k) with:

- its own rank and world size in the captured environment (``PMI_RANK``/``PMI_SIZE``, both places the
  export keeps them);
- its own clock: its session start (and the export's time shift, which nsys normalized the times with)
  moved ``k x CLOCK_STEP_NS`` earlier, so its session-relative times are ``k x CLOCK_STEP_NS`` larger
  while its wall-clock times stay put; every event also moves ``k`` us (distinct arrival times, no ties);
- ``COLLECTIVES`` instances of the ring's NCCL kernel (the export has one): copies of it every
  ``STEP_NS``;
- the ``delayed`` rank's NCCL kernels ``DELAY_NS`` late: the straggler COMM002 must name.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.analysis.planting import add_kernel_like, copy_export, open_gap, sqlite_rw
from tests.conftest import corpus_file

R0 = "nccl-ring-2node-r0-ault43.sqlite"
R1 = "nccl-ring-2node-r1-ault44.sqlite"
CLOCK_STEP_NS = 250_000_000
JITTER_NS = 1_000
COLLECTIVES = 12
STEP_NS = 3_000_000
DELAY_NS = 2_000_000


def _nccl(con: sqlite3.Connection) -> list[tuple[int, int, int]]:
    return con.execute("""SELECT k.rowid, k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                          ON s.id = k.shortName WHERE s.value LIKE 'nccl%' ORDER BY k.start""").fetchall()


def _set_rank(con: sqlite3.Connection, rank: int, size: int) -> None:
    con.execute("""UPDATE META_DATA_CAPTURE SET value = 'PMI_RANK="' || ? || '"' WHERE value LIKE 'PMI_RANK=%'""",
                [rank])
    con.execute("""UPDATE META_DATA_CAPTURE SET value = 'PMI_SIZE="' || ? || '"' WHERE value LIKE 'PMI_SIZE=%'""",
                [size])
    (env,) = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()
    entries = [f"PMI_RANK={rank}" if e.startswith("PMI_RANK=") else f"PMI_SIZE={size}" if e.startswith("PMI_SIZE=")
               else e for e in env.split(";")]
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'", [";".join(entries)])


def build_rank(dst: Path, rank: int, size: int, *, delayed: bool = False, collectives: int = COLLECTIVES,
               base: Path | None = None) -> Path:
    """Rank ``rank`` of ``size`` (see the module docstring); ``base``: the export to copy instead of r0/r1."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    path = copy_export(base or corpus_file(R0 if rank % 2 == 0 else R1), dst)
    open_gap(path, 0, rank * JITTER_NS)  # every event k us later
    con = sqlite_rw(path)
    with con:
        _set_rank(con, rank, size)
        origin = rank * CLOCK_STEP_NS
        con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs - ?", [origin])
        con.execute("UPDATE META_DATA_EXPORT SET value = CAST(CAST(value AS INTEGER) - ? AS TEXT) "
                    "WHERE name = 'EXPORT_CONFIG_TIME_SHIFT'", [origin])
        (rowid, start, end), *_ = _nccl(con)
        for j in range(1, collectives):
            add_kernel_like(con, rowid, start + j * STEP_NS, end + j * STEP_NS)
        if delayed:
            con.execute("""UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?, "end" = "end" + ?
                           WHERE rowid IN (SELECT k.rowid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                                           ON s.id = k.shortName WHERE s.value LIKE 'nccl%')""", [DELAY_NS, DELAY_NS])
    con.close()
    return path


def build_run(folder: Path, n: int = 16, delayed: int | None = 11, collectives: int = COLLECTIVES) -> list[Path]:
    """``n`` raw exports ``rank00.sqlite``... in ``folder`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [build_rank(folder / f"rank{k:02d}.sqlite", k, n, delayed=k == delayed, collectives=collectives)
            for k in range(n)]
