"""Planted cases of the rules that own idle by what the host was doing (MEM006, HOST003, HOST004): a host call or
range planted into a real loop's opened gap on the launching thread, so its whole length is the expected impact."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.planting import clone_row, new_string, open_gap, raw_api_names, raw_gaps, sqlite_rw

DELTA = 50_000_000  # the planted call or range, and the gap opened for it


def loop_gap(path: Path) -> int:
    """Where to open the gap and plant: the middle of the longest gap in the middle fifth of the device's span
    (inside the loop) during which no CUDA call is in progress (a call spanning the point would last the
    opened gap too, and a more specific call would own it)."""
    con = sqlite_rw(path)
    gaps = raw_gaps(con)
    calls = raw_api_names(con)
    con.close()
    lo, hi = min(g[2] for g in gaps), max(g[3] for g in gaps)
    mid = [g for g in gaps if lo + 2 * (hi - lo) // 5 <= g[2] and g[3] <= lo + 3 * (hi - lo) // 5
           and not any(s <= (g[2] + g[3]) // 2 <= e for _, s, e, _, _, _ in calls)]
    _, _, gs, ge = max(mid, key=lambda g: (g[3] - g[2], -g[2]))
    return (gs + ge) // 2


def plant_api(path: Path, name: str, delta: int = DELTA) -> int:
    """A CUDA call ``name`` on the launching thread covering exactly the gap opened at the middle of the loop."""
    at = loop_gap(path)
    open_gap(path, at, delta)
    con = sqlite_rw(path)
    rowid = con.execute("""SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k
                           ON k.correlationId = r.correlationId ORDER BY r.start LIMIT 1""").fetchone()[0]
    corr = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    with con:
        clone_row(con, "CUPTI_ACTIVITY_KIND_RUNTIME", rowid, start=at, end=at + delta,
                  nameId=new_string(con, name), correlationId=corr)
    con.close()
    return delta


def mem006_fires(path: Path, peer: Path | None) -> int:
    return plant_api(path, "cudaMallocPitch_v3020")


def host004_fires(path: Path, peer: Path | None) -> int:
    return plant_api(path, "cuModuleLoadData")


def host003_fires(path: Path, peer: Path | None, delta: int = DELTA) -> int:
    """An NVTX range named MPI_Recv on the launching thread over the gap opened in the loop."""
    at = loop_gap(path)
    open_gap(path, at, delta)
    con = sqlite_rw(path)
    tid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                      "ON k.correlationId = r.correlationId LIMIT 1").fetchone()[0]
    rowid = con.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 AND globalTid = ? LIMIT 1",
                        [tid]).fetchone()[0]
    with con:
        clone_row(con, "NVTX_EVENTS", rowid, start=at, end=at + delta, text="MPI_Recv", textId=None)
    con.close()
    return delta


def plant_os_call(path: Path, name: str, delta: int = DELTA) -> int:
    """An OS runtime call ``name`` on the launching thread over the gap opened in the loop."""
    at = loop_gap(path)
    open_gap(path, at, delta)
    con = sqlite_rw(path)
    tid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                      "ON k.correlationId = r.correlationId LIMIT 1").fetchone()[0]
    rowid = con.execute("SELECT rowid FROM OSRT_API WHERE globalTid = ? LIMIT 1", [tid]).fetchone()[0]
    with con:
        clone_row(con, "OSRT_API", rowid, start=at, end=at + delta, nameId=new_string(con, name))
    con.close()
    return delta
