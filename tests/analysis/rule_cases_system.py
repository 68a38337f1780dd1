"""Case table of the whole-system rules, as in ``rule_cases``: a planted variant of a real export
where each rule fires, with the impact computed here from the raw export, and a variant where it stays silent.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.analysis.planting import clone_row, has_table, raw_gaps, sqlite_rw
from tests.analysis.rule_cases import Case, unchanged

PID = "(globalPid >> 24) & 16777215"
UVM_KINDS = (11, 12, 13)


def _union_len(ivs: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for s, e in sorted(ivs):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def raw_units(con: sqlite3.Connection) -> dict[tuple[int, int], dict[str, list]]:
    """Per (pid, device) of the raw export: kernel intervals, and copies/memsets as
    (start, end, bytes, copyKind or None for a memset, pageable)."""
    units: dict[tuple[int, int], dict[str, list]] = {}
    for p, d, s, e in con.execute(f'SELECT {PID}, deviceId, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL'):  # noqa: S608
        units.setdefault((p, d), {"k": [], "m": []})["k"].append((s, e))
    if has_table(con, "CUPTI_ACTIVITY_KIND_MEMCPY"):
        for p, d, s, e, b, kind, sk, dk in con.execute(
                f'SELECT {PID}, deviceId, start, "end", bytes, copyKind, srcKind, dstKind '  # noqa: S608
                "FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
            units.setdefault((p, d), {"k": [], "m": []})["m"].append((s, e, b, kind, sk == 0 or dk == 0))
    if has_table(con, "CUPTI_ACTIVITY_KIND_MEMSET"):
        for p, d, s, e, b in con.execute(
                f'SELECT {PID}, deviceId, start, "end", bytes FROM CUPTI_ACTIVITY_KIND_MEMSET'):  # noqa: S608
            units.setdefault((p, d), {"k": [], "m": []})["m"].append((s, e, b, None, False))
    return units


def mem005_expected(path: Path, min_share_pct: float = 10.0, min_us: float = 1000.0) -> int | None:
    """MEM005's impact from its published definition, on the raw export: on each device whose memory-only
    time (|all ops| - |kernels|) is at least min_share_pct of its span, the memory-only time during which no
    pageable copy and no unified-memory migration runs (|all| - |kernels + pageable + UVM|)."""
    con = sqlite_rw(path)
    total = 0
    for unit in raw_units(con).values():
        ops = unit["k"] + [(s, e) for s, e, *_ in unit["m"]]
        span = max(e for _, e in ops) - min(s for s, _ in ops)
        whole = _union_len(ops)
        if 100.0 * (whole - _union_len(unit["k"])) < min_share_pct * span:
            continue
        theirs = [(s, e) for s, e, _, kind, pageable in unit["m"] if pageable or kind in UVM_KINDS]
        total += whole - _union_len(unit["k"] + theirs)
    con.close()
    return total if total >= min_us * 1000 else None


PLANT_BYTES = 256 * 2**20
PLANT_NS = 20_000_000  # 256 MiB in 20 ms: 13.4 GB/s


def mem005_fires(path: Path, peer: Path | None) -> int:
    """A compute-bound TensorRT export gets one pinned 256 MiB host-to-device copy after its last kernel."""
    con = sqlite_rw(path)
    rowid = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start LIMIT 1").fetchone()[0]
    last = con.execute('SELECT MAX("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    corr = con.execute("SELECT MAX(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    with con:
        clone_row(con, "CUPTI_ACTIVITY_KIND_MEMCPY", rowid, start=last + 10_000, end=last + 10_000 + PLANT_NS,
                  copyKind=1, srcKind=1, dstKind=2, bytes=PLANT_BYTES, correlationId=corr)
    con.close()
    expected = mem005_expected(path)
    assert expected and expected >= PLANT_NS
    return expected


def mem005_vecadd(path: Path, peer: Path | None) -> int:
    """The real vector add is copy-bound as it stands (1.1 GB of pinned copies around 4 short kernels)."""
    expected = mem005_expected(path)
    assert expected
    return expected


def mem005_pageable_is_mem001s(path: Path, peer: Path | None) -> int:
    """One of vecadd's host-to-device copies made pageable: its time is MEM001's, no longer MEM005's."""
    con = sqlite_rw(path)
    with con:
        con.execute("""UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcKind = 0 WHERE rowid =
                       (SELECT rowid FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 ORDER BY start LIMIT 1)""")
    con.close()
    return mem005_expected(path)


def mem005_silent(path: Path, peer: Path | None) -> None:
    assert mem005_expected(path) is None
    return None


SYSTEM_CASES = [
    Case("MEM005", "tensorrt-3090.sqlite", mem005_fires),
    Case("MEM005", "vecadd-2026.sqlite", mem005_vecadd),
    Case("MEM005", "vecadd-2026.sqlite", mem005_pageable_is_mem001s),
    Case("MEM005", "tensorrt-3090.sqlite", mem005_silent),
]


# ----------------------------------------------------------------------------- KRN003

def _disc(sorted_vals: list[int], q: float) -> int:
    """quantile_disc as KRN003 documents it: the value at rank floor(q * (n - 1))."""
    return sorted_vals[int(q * (len(sorted_vals) - 1))]


def krn003_expected(path: Path, min_n: int = 20, min_median_ns: int = 10_000, spread: float = 2.0,
                    factor: float = 3.0, min_excess_ns: int = 1_000_000) -> int | None:
    """KRN003's impact from its published definition, on the raw export (no NCCL kernels in these files)."""
    con = sqlite_rw(path)
    groups: dict[tuple, list[int]] = {}
    for row in con.execute(f"""
            SELECT {PID}, k.deviceId, s.value, gridX, gridY, gridZ, blockX, blockY, blockZ, k."end" - k.start
            FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"""):  # noqa: S608
        groups.setdefault(row[:9], []).append(row[9])
    con.close()
    total = 0
    for durs in groups.values():
        durs.sort()
        if len(durs) < min_n:
            continue
        p10, p50, p90 = (_disc(durs, q) for q in (0.1, 0.5, 0.9))
        if p50 < min_median_ns:
            continue
        unstable = p90 >= spread * max(p10, 1)
        total += sum(d - p50 for d in durs if d >= factor * p50 or (unstable and d > p50))
    return total if total >= min_excess_ns else None


def krn003_fires(path: Path, peer: Path | None) -> int:
    """Five of the OpenACC loop's 1000 identical kernels (every tenth from the 100th) run ten times longer."""
    con = sqlite_rw(path)
    rows = con.execute('SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start').fetchall()
    with con:
        for (rowid,) in rows[100:150:10]:
            con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + 10 * ("end" - start) WHERE rowid = ?',
                        [rowid])
    con.close()
    expected = krn003_expected(path)
    assert expected
    return expected


def krn003_silent(path: Path, peer: Path | None) -> None:
    assert krn003_expected(path) is None
    return None


def krn003_warmup(path: Path, peer: Path | None) -> int:
    """The real CLUE run as it stands: the first histogram and cluster kernels (warm-up) are outliers."""
    expected = krn003_expected(path)
    assert expected
    return expected


SYSTEM_CASES += [
    Case("KRN003", "openacc-v100.sqlite", krn003_fires),
    Case("KRN003", "openacc-v100.sqlite", krn003_silent),
    Case("KRN003", "clue-um-t4.sqlite", krn003_warmup),
]


# ----------------------------------------------------------------------------- HOST001

def _launch_thread(con: sqlite3.Connection) -> int:
    """globalTid of the thread whose runtime call launched the first kernel."""
    return con.execute("""SELECT r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                          ON r.correlationId = k.correlationId ORDER BY k.start LIMIT 1""").fetchone()[0]


def _union(ivs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def _measure(gap: tuple[int, int], union: list[tuple[int, int]]) -> int:
    return sum(max(0, min(e, gap[1]) - max(s, gap[0])) for s, e in union)


def idle_in_os_calls(con: sqlite3.Connection) -> int:
    """The idle (NVIDIA's gaps on the raw export) during which the launching thread sat in an OS runtime call and
    in no CUDA call (a CUDA call is more specific than the OS call inside it), summed over the gaps; written on
    the raw tables, independently of the anatomy. The launching threads: those whose runtime calls launched GPU
    work (the export has one process and no NVTX)."""
    tids = {t for (t,) in con.execute("""SELECT DISTINCT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        WHERE r.correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL
                                  UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY)""")}
    marks = ", ".join("?" for _ in tids)
    os_calls = _union(con.execute(f'SELECT start, "end" FROM OSRT_API WHERE globalTid IN ({marks})',  # noqa: S608
                                  list(tids)).fetchall())
    cuda = _union(con.execute(f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid IN ({marks})',  # noqa: S608
                              list(tids)).fetchall())
    total = 0
    for _, _, gs, ge in raw_gaps(con):
        in_os = [(max(s, gs), min(e, ge)) for s, e in os_calls if s < ge and e > gs]
        total += sum(e - s - _measure((s, e), cuda) for s, e in in_os)
    return total


def host001_fires(path: Path, peer: Path | None) -> int:
    """The vector add's longest idle gap that no sync explains grows by 50 ms at a moment the launching thread is
    in no CUDA call, and that thread sits in a ``read`` call across all of the gap: HOST001 owns the idle inside
    OS calls and outside CUDA calls (a CUDA call is more specific than the OS call around it), in this gap and
    every other (``idle_in_os_calls``, on the raw tables); GPU001 keeps the rest of the gap."""
    from tests.analysis.planting import new_string, open_gap, raw_api_names
    from tests.analysis.rule_cases import DELTA, _unsynced_gaps

    con = sqlite_rw(path)
    pid, _, gs, ge = max(_unsynced_gaps(con), key=lambda g: (g[3] - g[2], g[2]))
    busy = _union([(s, e) for _, s, e, _, p, _ in raw_api_names(con) if p == pid])
    free, at = [], gs  # the stretches of the gap in no CUDA call of its process
    for s, e in busy:
        if s > at and at < ge:
            free.append((at, min(s, ge)))
        at = max(at, e)
    if at < ge:
        free.append((at, ge))
    lo, hi = max(free, key=lambda f: (f[1] - f[0], f[0]))
    con.close()
    open_gap(path, (lo + hi) // 2, DELTA)
    con = sqlite_rw(path)
    (gap,) = [g for g in raw_gaps(con) if g[2] == gs]
    tid = _launch_thread(con)
    rowid = con.execute("SELECT rowid FROM OSRT_API WHERE globalTid = ? LIMIT 1", [tid]).fetchone()[0]
    with con:
        clone_row(con, "OSRT_API", rowid, start=gap[2] - 1_000, end=gap[3] + 1_000, nameId=new_string(con, "read"))
    expected = idle_in_os_calls(con)
    con.close()
    return expected


SYSTEM_CASES += [
    Case("HOST001", "vecadd-2026.sqlite", host001_fires),
    Case("HOST001", "vecadd-2026.sqlite", unchanged),
]


# ----------------------------------------------------------------------------- KRN002

# FP32 SIMT GEMM/convolution kernels as the libraries name them (written here as LIKE patterns on the raw
# export, independently of the rule's regular expressions).
SIMT_LIKE = ("%\\_sgemm\\_%", "%convolve\\_sgemm%", "%\\_scudnn\\_%", "%gemmSN\\_%\\_kernel<float%")


def krn002_expected(path: Path) -> int:
    con = sqlite_rw(path)
    where = " OR ".join(f"s.value LIKE '{p}' ESCAPE '\\'" for p in SIMT_LIKE)
    total = con.execute(f"""SELECT COALESCE(SUM(k."end" - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                            JOIN StringIds s ON s.id = k.demangledName WHERE {where}""").fetchone()[0]  # noqa: S608
    con.close()
    return int(total)


def krn002_fires(path: Path, peer: Path | None) -> int:
    """The TensorRT engine's costliest FP16 tensor-core convolution renamed to a cuBLAS FP32 SIMT GEMM."""
    con = sqlite_rw(path)
    sid = con.execute("""SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1
                         ORDER BY SUM("end" - start) DESC LIMIT 1""").fetchone()[0]
    with con:
        con.execute("UPDATE StringIds SET value = 'ampere_sgemm_128x64_nn' WHERE id = ?", [sid])
    con.close()
    expected = krn002_expected(path)
    assert expected > 1_000_000
    return expected


def krn002_cudnn_fp32(path: Path, peer: Path | None) -> int:
    """The real PyTorch CNN on an RTX 2070 SUPER: cuDNN picked FP32 SIMT convolutions (FP16 tensor cores idle)."""
    expected = krn002_expected(path)
    assert expected
    return expected


SYSTEM_CASES += [
    Case("KRN002", "tensorrt-3090.sqlite", krn002_fires),
    Case("KRN002", "tensorrt-3090.sqlite", unchanged),
    Case("KRN002", "pytorch-dlprof-relu.sqlite", krn002_cudnn_fp32, thresholds={"KRN002.min_time_us": 0}),
]


# ----------------------------------------------------------------------------- COMM004

def _longest_gap_nccl(path: Path, same_stream: bool) -> int:
    """An NCCL kernel inside the vector add's longest idle gap (so that no compute runs beside it), on the
    stream of the first compute kernel (serialized with compute) or on a stream of its own."""
    from tests.analysis.planting import raw_gaps
    from tests.analysis.rule_cases import _add_nccl

    con = sqlite_rw(path)
    _, _, gs, ge = max(raw_gaps(con), key=lambda g: g[3] - g[2])
    stream = con.execute("SELECT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()[0]
    length = min(2_000_000, (ge - gs) // 2)
    _add_nccl(con, gs + 1_000, gs + 1_000 + length, stream=stream if same_stream else None)
    con.close()
    return length


def comm004_fires(path: Path, peer: Path | None) -> int:
    return _longest_gap_nccl(path, True)


def comm004_own_stream(path: Path, peer: Path | None) -> None:
    _longest_gap_nccl(path, False)  # COMM001's instead (its own planted case)
    return None


SYSTEM_CASES += [
    Case("COMM004", "vecadd-2026.sqlite", comm004_fires),
    Case("COMM004", "vecadd-2026.sqlite", comm004_own_stream),
]


# ----------------------------------------------------------------------------- HOST002

HOST002_FUNCTION = "_PyEval_EvalFrameDefault"
HOST002_SAMPLES = 20


def raw_launch_threads(con: sqlite3.Connection) -> set[tuple[int, int]]:
    """(pid, tid) of the threads whose runtime calls launched GPU work, joined by pid and correlation id."""
    from tests.analysis.planting import GPU_TABLES

    out: set[tuple[int, int]] = set()
    for table in GPU_TABLES:
        if has_table(con, table):
            out |= set(con.execute(f"""
                SELECT DISTINCT (r.globalTid >> 24) & 16777215, r.globalTid & 16777215
                FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN {table} g ON g.correlationId = r.correlationId
                 AND (g.globalPid >> 24) & 16777215 = (r.globalTid >> 24) & 16777215""").fetchall())  # noqa: S608
    return out


def host002_expected(path: Path, min_gap_ns: int = 1_000_000, min_samples: int = 10,
                     min_idle_ns: int = 1_000_000) -> int | None:
    """HOST002's impact from its published definition on the raw export: the length of every idle gap (NVIDIA's
    pairing, at least 1 ms) that holds a CPU sample of a launching thread of its process."""
    from tests.analysis.planting import raw_gaps

    con = sqlite_rw(path)
    threads = raw_launch_threads(con)
    samples = [(p, t) for p, tid, t in con.execute(
        "SELECT (globalTid >> 24) & 16777215, globalTid & 16777215, start FROM COMPOSITE_EVENTS")
        if (p, tid) in threads]
    gaps = [g for g in raw_gaps(con) if g[3] - g[2] >= min_gap_ns]
    con.close()
    total = n = 0
    for p, _, gs, ge in gaps:
        k = sum(1 for sp, t in samples if sp == p and gs <= t < ge)
        if k:
            total += ge - gs
            n += k
    return total if n >= min_samples and total >= min_idle_ns else None


def host002_fires(path: Path, peer: Path | None) -> int:
    """The vector add's longest unsynced idle gap grows by 50 ms, and 20 CPU samples of its launching thread
    inside it run the Python interpreter (leaf frame; ``main`` below it): HOST002 names it, and its impact
    is every sampled gap's length."""
    from tests.analysis.planting import new_string, open_gap
    from tests.analysis.rule_cases import DELTA, _unsynced_gaps

    con = sqlite_rw(path)
    _, _, gs, ge = max(_unsynced_gaps(con), key=lambda g: (g[3] - g[2], g[2]))
    con.close()
    at = (gs + ge) // 2
    open_gap(path, at, DELTA)
    con = sqlite_rw(path)
    tid = _launch_thread(con)
    with con:
        con.execute("UPDATE COMPOSITE_EVENTS SET start = start + ? WHERE start >= ?", [DELTA, at])  # samples too
        fn, main, mod = new_string(con, HOST002_FUNCTION), new_string(con, "main"), new_string(con, "python3.12")
        first = con.execute("SELECT MAX(id) + 1 FROM COMPOSITE_EVENTS").fetchone()[0]
        for i in range(HOST002_SAMPLES):
            sid = first + i
            con.execute("INSERT INTO COMPOSITE_EVENTS (id, start, cpu, globalTid, cpuCycles) VALUES (?, ?, 3, ?, 1)",
                        [sid, at + 1_000 + i * (DELTA // HOST002_SAMPLES), tid])
            con.execute("INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, stackDepth) VALUES (?, ?, ?, 0)",
                        [sid, fn, mod])
            con.execute("INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, stackDepth) VALUES (?, ?, ?, 1)",
                        [sid, main, mod])
    con.close()
    expected = host002_expected(path)
    assert expected is not None and expected >= DELTA
    return expected


def host002_silent(path: Path, peer: Path | None) -> None:
    """The real vector add: its few samples in idle gaps stay under the thresholds (checked on the raw export)."""
    assert host002_expected(path) is None
    return None


def host002_real(path: Path, peer: Path | None) -> int:
    """The real CuPy power iteration (CPU sampling on): its launching thread was sampled in its idle gaps."""
    expected = host002_expected(path)
    assert expected is not None
    return expected


SYSTEM_CASES += [
    Case("HOST002", "vecadd-2026.sqlite", host002_fires),
    Case("HOST002", "cupy-power-iteration.sqlite", host002_real),
    Case("HOST002", "vecadd-2026.sqlite", host002_silent),
]


# ----------------------------------------------------------------------------- COMM003
# No corpus export carries NCCL payload values: the NCCL exports have the payload schemas
# (NVTX_PAYLOAD_SCHEMAS / _SCHEMA_ENTRIES) but were exported without blobs or JSON (torchrun's
# META_DATA_EXPORT says EXPORT_PARAM_INCLUDE_BLOBS=false), so binaryData and jsonText are NULL. The plants
# below write the payloads into the real exports as the export's own schema entries lay them out
# (little-endian fields at each entry's offset), and COMM003's impact is recomputed here from the raw rows.

NCCL_PID = "(e.globalTid >> 24) & 16777215"


def _nvtx_rows(con: sqlite3.Connection, name: str) -> list[tuple[int, int, int, int]]:
    """(rowid, pid, tid, start) of the NVTX ranges with this text (inline or registered)."""
    return con.execute(f"""SELECT e.rowid, {NCCL_PID}, e.globalTid & 16777215, e.start FROM NVTX_EVENTS e
                           LEFT JOIN StringIds s ON s.id = e.textId
                           WHERE COALESCE(e.text, s.value) = ? ORDER BY e.start""", [name]).fetchall()  # noqa: S608


def _entry_offset(con: sqlite3.Connection, field: str) -> int:
    (off,) = {o or 0 for (o,) in con.execute('SELECT "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE name = ?',
                                             [field])}
    return off


def _payload(offset: int, value: int, width: int, size: int) -> bytes:
    buf = bytearray(size)
    buf[offset:offset + width] = value.to_bytes(width, "little")
    return bytes(buf)


def plant_nccl_sizes(path: Path, sizes: dict[str, int], nranks: int | None = None, comm_id: int | None = None) -> None:
    """Write NCCL payloads into a real export: each named call's message size (and communicator id, where the
    export's schemas have that entry), each comm init's rank count."""
    con = sqlite_rw(path)
    size_off = _entry_offset(con, "Message size [bytes]")
    with con:
        for name, size in sizes.items():
            for rowid, *_ in _nvtx_rows(con, name):
                payload = bytearray(_payload(size_off, size, 8, size_off + 16))
                if comm_id is not None:
                    off = _entry_offset(con, "NCCL communicator ID")
                    payload[off:off + 8] = comm_id.to_bytes(8, "little")
                con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", [bytes(payload), rowid])
        if nranks is not None:
            off = _entry_offset(con, "No. of ranks")
            for rowid, *_ in _nvtx_rows(con, "ncclCommInitRank"):
                con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?",
                            [_payload(off, nranks, 4, off + 8), rowid])
    con.close()


def comm003_expected(path: Path, sizes: dict[str, int], n: int, peak_gbps: float, min_eff_pct: float = 50.0,
                     min_bytes: int = 2**20) -> int | None:
    """COMM003's impact from its definition on the raw export: each call belongs to the first NCCL kernel its
    thread launched at or after the call began; a kernel's bytes are its calls' sizes (Send/Recv: the larger
    direction); busBw factor 2(n-1)/n for AllReduce, 1 for Send/Recv; groups by op, algorithm, protocol,
    power-of-two size class and device; a bandwidth-bound group below min_eff_pct of the peak costs
    time - bus bytes / (peak * min_eff_pct)."""
    import bisect
    import re

    con = sqlite_rw(path)
    kernels = con.execute("""
        SELECT k.start, k."end", k.deviceId, s.value, r.globalTid & 16777215, (k.globalPid >> 24) & 16777215, r.start
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
             AND (r.globalTid >> 24) & 16777215 = (k.globalPid >> 24) & 16777215
        WHERE s.value LIKE 'nccl%'""").fetchall()
    launches: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, (_, _, _, _, tid, pid, launch) in enumerate(kernels):
        launches.setdefault((pid, tid), []).append((launch, i))
    for v in launches.values():
        v.sort()
    got: dict[int, dict[str, int]] = {}
    for name, size in sizes.items():
        for _, pid, tid, start in _nvtx_rows(con, name):
            seq = launches.get((pid, tid), [])
            j = bisect.bisect_left(seq, (start, -1))
            if j < len(seq):
                k = got.setdefault(seq[j][1], {})
                k[name] = k.get(name, 0) + size
    con.close()
    groups: dict[tuple, list[float]] = {}
    for i, parts in got.items():
        start, end, device, short, *_ = kernels[i]
        op = re.match(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)", short).group(1)
        nbytes = max(parts.get("ncclSend", 0), parts.get("ncclRecv", 0)) if op == "SendRecv" else \
            sum(v for c, v in parts.items() if c not in ("ncclSend", "ncclRecv"))
        factor = 2.0 * (n - 1) / n if op == "AllReduce" else 1.0
        algo = re.search(r"_(RING|TREE)_", short)
        proto = re.search(r"_(LL128|LL|SIMPLE)_", short)
        key = (op, algo and algo.group(1), proto and proto.group(1), nbytes.bit_length() - 1, device)
        g = groups.setdefault(key, [0, 0.0, float("inf")])
        g[0] += end - start
        g[1] += nbytes * factor
        g[2] = min(g[2], nbytes)
    target = peak_gbps * min_eff_pct / 100.0
    total = sum(int(t - bus / target) for t, bus, least in groups.values() if least >= min_bytes and bus / t < target)
    return total or None


COMM003_RING = {"ncclAllReduce": 2 * 2**20}  # the repo's directory says 2 MB (results_Ring_Simple_2MB_...)
COMM003_PEAK = {"COMM003.link_peak_gbps": 25.0}


def comm003_allreduce(path: Path, peer: Path | None) -> int:
    """A real 2-node AllReduce (rank 0) given its payloads: 2 MiB in an 11.6 ms kernel, far below a 25 GB/s link."""
    plant_nccl_sizes(path, COMM003_RING, nranks=2)
    expected = comm003_expected(path, COMM003_RING, 2, 25.0)
    assert expected
    return expected


def comm003_fast_allreduce(path: Path, peer: Path | None) -> None:
    """The same kernel carrying 256 MiB: 23 GB/s of bus bandwidth, above half of 25 GB/s."""
    sizes = {"ncclAllReduce": 256 * 2**20}
    plant_nccl_sizes(path, sizes, nranks=2)
    assert comm003_expected(path, sizes, 2, 25.0) is None
    return None


COMM003_SENDRECV = {"ncclSend": 16 * 2**20, "ncclRecv": 16 * 2**20}
COMM003_NVLINK = {"COMM003.link_peak_gbps": 450.0}


def comm003_sendrecv(path: Path, peer: Path | None) -> int:
    """torchrun's two ranks in one file (H100, NVLink): 16 MiB per ncclSend/ncclRecv, grouped into SendRecv kernels."""
    plant_nccl_sizes(path, COMM003_SENDRECV)
    expected = comm003_expected(path, COMM003_SENDRECV, 2, 450.0)
    assert expected
    return expected


SYSTEM_CASES += [
    Case("COMM003", "nccl-ring-2node-r0-ault43.sqlite", comm003_allreduce, thresholds=COMM003_PEAK),
    Case("COMM003", "nccl-ring-2node-r0-ault43.sqlite", comm003_fast_allreduce, thresholds=COMM003_PEAK),
    Case("COMM003", "torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", comm003_sendrecv, thresholds=COMM003_NVLINK),
]
