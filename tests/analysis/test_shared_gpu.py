"""Issue #39 class 8: two processes sharing one GPU in one export are one device.

Planted on a real export (cupy-power-iteration: one process on one T4): a second process is added whose GPU
operations are copies of the first's, 300 us later, on the same CUDA ordinal. When the export's device table maps
both processes' ordinal to the same GPU, the breakdown partitions that GPU's timeline once: one device, its span the
union's, its busy time the union of both processes' operations (checked against the raw rows), its idle never above
its span. When the export does not say which GPU the second process used, the two stay apart (an ordinal alone does
not identify a GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import analyze
from tests.analysis.planting import GPU_TABLES, copy_export, has_table, ingest_copy, raw_gpu_ops, sqlite_rw
from tests.conftest import corpus_file

EXPORT = "cupy-power-iteration.sqlite"
SHIFT = 300_000
PID_STEP = 1 << 24  # globalPid carries the pid in bits 24-47


def _plant(path: Path, *, same_gpu: bool) -> int:
    con = sqlite_rw(path)
    with con:
        pid = con.execute("SELECT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()[0]
        for table in GPU_TABLES:
            if not has_table(con, table):
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            sel = ", ".join({"globalPid": f'"globalPid" + {PID_STEP}', "start": f'start + {SHIFT}',
                             "end": f'"end" + {SHIFT}'}.get(c, f'"{c}"') for c in cols)
            con.execute(f'INSERT INTO "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '  # noqa: S608
                        f"SELECT {sel} FROM \"{table}\"")
        if same_gpu:
            con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE (cudaId, gpuId, pid) "
                        "SELECT cudaId, gpuId, pid + 1 FROM TARGET_INFO_CUDA_DEVICE WHERE pid = ?", [pid])
    con.close()
    return pid


def _union(intervals: list[tuple[int, int]]) -> tuple[int, int, int]:
    """(first start, last end, union length) of intervals."""
    total, reach, first = 0, None, None
    for s, e in sorted(intervals):
        first = s if first is None else first
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return first, reach, total


@pytest.mark.parametrize("same_gpu", [True, False], ids=["one-gpu", "gpu-unknown"])
def test_two_processes_on_one_gpu_are_one_device(tmp_path, same_gpu) -> None:
    src = copy_export(corpus_file(EXPORT), tmp_path / "a.sqlite")
    pid = _plant(src, same_gpu=same_gpu)
    result = analyze([ingest_copy(src, tmp_path / "a.duckdb")], window="all").to_json()
    (rep,) = result["reports"]
    devices = rep["breakdown"]["devices"]
    for d in devices:
        assert 0 <= d["idle_ns"] <= d["span_ns"]
    con = sqlite_rw(src)
    ops = raw_gpu_ops(con)
    con.close()
    if not same_gpu:
        assert sorted(d["pid"] for d in devices) == [pid, pid + 1]
        return
    (d,) = devices
    first, last, busy = _union([(s, e) for _, _, s, e, _, _ in ops])
    assert d["pid"] == pid and d["span_ns"] == last - first
    assert d["span_ns"] - d["idle_ns"] == busy  # busy once on the device's timeline, from the raw rows
    bd = rep["breakdown"]
    assert bd["idle_ns"] <= bd["span_ns"]
