"""Idle gaps of every GPU, each owned by at most one rule, so that rule impacts add up.

A gap is found with NVIDIA's ``gpu_gaps`` semantics (``analysis.activity.unit_gaps``, the same gaps as
``analysis.intervals.GAPS_SQL``): per process and device, profiler overhead counted as busy, leading
and trailing idle excluded, every gap of any length.

Precedence (the first that applies owns the whole gap):

1. ``SYNC001`` - a blocking synchronization call of the process (``cudaDeviceSynchronize``,
   ``cuStreamSynchronize`` ...) was in progress when the device went idle: the host was waiting for
   the GPU to drain instead of queueing the next work, so the idle until the next GPU work is the sync's.
2. ``MEM002`` - a synchronous copy call (not excluded as NVIDIA does) was in progress when it went idle.
3. ``GPU001`` - the gap is at least ``GPU001.min_gap_us`` long.
4. ``KRN001`` - the gap lies inside a run of short kernels (launch-bound work).
5. ``GPU002`` - the gap starts inside a low-utilization window (GPU002 decides this last, from the
   gaps left unowned in the owner table, so the large table does not depend on its thresholds).

Gaps matching none stay unowned (small idle nobody can attribute). The owner table is built once per
open trace and parameter set, as a DuckDB temporary table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from analysis.activity import Runs, short_kernel_runs, unit_gaps, unit_ops
from analysis.intervals import array_table, table_exists, temp_table
from analysis.rules.nsys.common import SYNC_API_RE, api_name_in, load_sql, unit_spans
from analysis.trace import Trace

# The thresholds that decide ownership, with their defaults (rule id, threshold name).
OWNERSHIP_PARAMS: dict[tuple[str, str], float] = {
    ("GPU001", "min_gap_us"): 1000.0,
    ("KRN001", "short_kernel_us"): 10.0,
    ("KRN001", "min_run_kernels"): 20.0,
    ("GPU002", "window_min_us"): 1000.0,
    ("GPU002", "max_windows"): 1000.0,
    ("GPU002", "max_busy_pct"): 50.0,
}

# The owner column of the owner table holds these codes (NULL: unowned); ``owner_is`` writes the test.
OWNER_CODES = {"SYNC001": 1, "MEM002": 2, "GPU001": 3, "KRN001": 4}


def owner_is(rule_id: str) -> str:
    """SQL predicate selecting the gaps a rule owns in the owner table."""
    return f"owner = {OWNER_CODES[rule_id]}"


# Synchronous copies that block the host, with NVIDIA's exclusions: copies within one device, and
# host-to-device copies of at most 64 KiB (the driver stages those and returns at once).
# ``{copy_calls}`` is the IN-list of the synchronous memcpy call names (``COPY_CALL_RE``, no "Async").
BLOCKING_COPIES_SQL = """
    SELECT a.pid, a.tid, a.start_ns, a.end_ns, a.name, m.device, m.stream, m.copy_kind, m.bytes,
           m.start_ns AS op_start, m.end_ns AS op_end, m.src_kind, m.dst_kind
    FROM cuda_api a JOIN memcpy m ON m.pid = a.pid AND m.correlation_id = a.correlation_id
    WHERE {copy_calls}
      AND NOT (m.copy_kind = 'DtoD' AND (m.src_device IS NULL OR m.src_device = m.dst_device))
      AND NOT (m.copy_kind = 'HtoD' AND m.bytes <= 65536)
"""
# Synchronous memcpy calls of the runtime and driver APIs (RE2 has no lookahead, hence the two tests).
COPY_CALL_RE = r"^cu(da)?Memcpy"


def blocking_copies(trace: Trace) -> str:
    """Temp table of the blocking copy calls (see ``BLOCKING_COPIES_SQL``); returns its name."""
    if not (trace.has_rows("cuda_api") and trace.has_rows("memcpy")):
        return temp_table(trace, "_gp_blocking_copies", BLOCKING_COPIES_SQL.format(copy_calls="FALSE") + " LIMIT 0")
    calls = api_name_in(trace, COPY_CALL_RE, "a.name")
    sql = BLOCKING_COPIES_SQL.format(copy_calls=f"{calls} AND NOT contains(a.name, 'Async')")
    return temp_table(trace, "_gp_blocking_copies", sql)


def ownership_params(all_params: Mapping[str, Mapping[str, float]] | None) -> dict[str, float]:
    """The ownership thresholds in ns/counts, from every rule's resolved thresholds (defaults if absent)."""
    def get(rule: str, name: str) -> float:
        return float((all_params or {}).get(rule, {}).get(name, OWNERSHIP_PARAMS[(rule, name)]))

    return {
        "min_gap_ns": int(get("GPU001", "min_gap_us") * 1000),
        "short_ns": int(get("KRN001", "short_kernel_us") * 1000),
        "min_run": int(get("KRN001", "min_run_kernels")),
        "win_min_ns": max(1, int(get("GPU002", "window_min_us") * 1000)),
        "max_windows": max(1, int(get("GPU002", "max_windows"))),
        "max_busy_pct": get("GPU002", "max_busy_pct"),
    }


def sync_names(trace: Trace, gaps: list[tuple[int, int]]) -> list[str | None]:
    """For a bounded sample of (pid, gap_start), the sync call in progress when the gap opened."""
    if not gaps:
        return []
    values = ", ".join(f"({i}, {int(p)}, {int(g)})" for i, (p, g) in enumerate(gaps))
    rows = dict(trace.sql(f"""
        WITH pts(i, pid, g) AS (VALUES {values})
        SELECT i, arg_max(a.name, a.start_ns) FROM pts JOIN cuda_api a
          ON a.pid = pts.pid AND a.start_ns <= pts.g AND a.end_ns >= pts.g
        WHERE {api_name_in(trace, SYNC_API_RE, "a.name")}
        GROUP BY i"""))  # noqa: S608 - integers and escaped names
    return [rows.get(i) for i in range(len(gaps))]


def _sig(values: Mapping[str, float]) -> str:
    return hashlib.sha1(repr(sorted(values.items())).encode()).hexdigest()[:10]


def _runs(trace: Trace, short_ns: int, min_run: int) -> list[Runs]:
    """Each unit's runs of short kernels (``activity.short_kernel_runs``), cached on the trace."""
    key = ("krn_runs", short_ns, min_run)
    if key not in trace.memo:
        trace.memo[key] = [short_kernel_runs(u, short_ns, min_run, id_base=i << 40)
                           for i, u in enumerate(unit_ops(trace))]
    return trace.memo[key]


def krn_runs(trace: Trace, p: Mapping[str, float]) -> str:
    """Temp table of the runs of short kernels for these parameters; returns its name.

    Columns: pid, device, run_id, run_start, run_end, run_kernels, kernel_ns (one row per run of at least
    ``min_run`` consecutive kernels each shorter than ``short_ns``, in device order).
    """
    q = {"short_ns": int(p["short_ns"]), "min_run": int(p["min_run"])}
    name = f"_gp_runs_{_sig(q)}"
    if not table_exists(trace, name):
        parts = [({"run_id": r.run_id, "run_start": r.run_start, "run_end": r.run_end,
                   "run_kernels": r.run_kernels, "kernel_ns": r.kernel_ns}, u.pid, u.device)
                 for u, r in zip(unit_ops(trace), _runs(trace, q["short_ns"], q["min_run"]), strict=True)]
        array_table(trace, name, RUNS_COLUMNS, "run_id, run_start, run_end, run_kernels, kernel_ns", parts)
    return name


RUNS_COLUMNS = ("pid INTEGER, device INTEGER, run_id BIGINT, run_start BIGINT, run_end BIGINT, "
                "run_kernels BIGINT, kernel_ns BIGINT")
OWNED_COLUMNS = ("pid INTEGER, device INTEGER, gap_start BIGINT, gap_end BIGINT, gap_ns BIGINT, "
                 "owner UTINYINT, run_id BIGINT")


class _Calls:
    """Host calls of one kind per process, sorted by start, with the running maximum of their ends: one
    binary search then answers "was any call that started at or before t still running at t?"."""

    def __init__(self, trace: Trace, sql: str | None) -> None:
        self.by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if sql is None:
            return
        d = {k: np.asarray(v) for k, v in trace.con.execute(sql).fetchnumpy().items()}
        pids = np.unique(d["pid"])
        for pid in pids:
            m = slice(None) if len(pids) == 1 else d["pid"] == pid
            start, end = d["start_ns"][m], d["end_ns"][m]
            order = np.argsort(start, kind="stable")
            self.by_pid[int(pid)] = (start[order], np.maximum.accumulate(end[order]))

    def running_at(self, pid: int | None, t: np.ndarray) -> np.ndarray:
        calls = self.by_pid.get(pid) if pid is not None else None
        out = np.zeros(len(t), dtype=bool)
        if calls is None or not len(t):
            return out
        start, reach = calls
        idx = np.searchsorted(start, t, side="right") - 1
        hit = idx >= 0
        out[hit] = reach[idx[hit]] >= t[hit]
        return out


def _calls_sql(table: str, where: str) -> str | None:
    if where == "FALSE":
        return None
    return (f"SELECT pid, start_ns, end_ns FROM {table} "  # noqa: S608 - server-made names
            f"WHERE {where} AND pid IS NOT NULL AND start_ns IS NOT NULL AND end_ns IS NOT NULL")


def low_windows(trace: Trace, all_params: Mapping[str, Mapping[str, float]] | None) -> str:
    """Temp table of the low-utilization windows (idle from the owner table's gaps); returns its name."""
    p = ownership_params(all_params)
    owned = owned_gaps(trace, all_params)
    q = {"win_min_ns": p["win_min_ns"], "max_windows": p["max_windows"], "max_busy_pct": p["max_busy_pct"]}
    sql = load_sql("low_windows.sql").format(gaps=f"SELECT pid, device, gap_start, gap_end FROM {owned}")  # noqa: S608 - server-made name
    return temp_table(trace, f"_gp_low_{_sig({**q, 'owned': owned})}", sql, q)


def owned_gaps(trace: Trace, all_params: Mapping[str, Mapping[str, float]] | None) -> str:
    """Temp table of every gap with its ``owner`` code (NULL: unowned, maybe GPU002's) and ``run_id``
    (KRN001's gaps only). Columns: ``OWNED_COLUMNS``.

    Built from ``activity``'s sorted arrays: each test runs only on the gaps the earlier ones leave, and
    each is a binary search per gap (the calls' running maximum of ends makes the test exact even with
    calls on several threads).
    """
    p = ownership_params(all_params)
    unit_spans(trace)
    sig = _sig({k: p[k] for k in ("min_gap_ns", "short_ns", "min_run")})
    name = f"_gp_owned_{sig}"
    if table_exists(trace, name):
        return name
    runs = _runs(trace, p["short_ns"], p["min_run"])
    syncs = _Calls(trace, _calls_sql("cuda_api", api_name_in(trace, SYNC_API_RE)))
    copies = _Calls(trace, _calls_sql(blocking_copies(trace), "TRUE"))
    parts = []
    for ug, r in zip(unit_gaps(trace), runs, strict=True):
        gs, ge, pid = ug.gap_start, ug.gap_end, ug.unit.pid
        owner = np.zeros(len(gs), dtype=np.uint8)
        run_id = np.zeros(len(gs), dtype=np.int64)
        owner[syncs.running_at(pid, gs)] = OWNER_CODES["SYNC001"]
        left = np.flatnonzero(owner == 0)
        by_copy = copies.running_at(pid, gs[left])
        owner[left[by_copy]] = OWNER_CODES["MEM002"]
        left = left[~by_copy]
        long_gap = (ge[left] - gs[left]) >= p["min_gap_ns"]
        owner[left[long_gap]] = OWNER_CODES["GPU001"]
        left = left[~long_gap]
        if len(r.run_start) and len(left):
            # The last run that started at or before the gap owns it when it lasts past the gap's end.
            idx = np.searchsorted(r.run_start, gs[left], side="right") - 1
            hit = idx >= 0
            hit[hit] = r.run_end[idx[hit]] >= ge[left[hit]]
            owner[left[hit]] = OWNER_CODES["KRN001"]
            run_id[left[hit]] = r.run_id[idx[hit]]
        parts.append(({"gap_start": gs, "gap_end": ge, "owner": owner, "run_id": run_id}, pid, ug.unit.device))
    array_table(trace, name, OWNED_COLUMNS,
                f"gap_start, gap_end, gap_end - gap_start, NULLIF(owner, 0), "
                f"CASE WHEN owner = {OWNER_CODES['KRN001']} THEN run_id END", parts)
    return name
