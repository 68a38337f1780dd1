"""Planted NCCL logs built at test time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.conftest import corpus_dir, corpus_file

RING_EXPORTS = ("nccl-ring-2node-r0-ault43.sqlite", "nccl-ring-2node-r1-ault44.sqlite")


def export_pids(short: str) -> list[int]:
    """The process ids that ran kernels in a corpus nsys export, by direct SQL on it (``PROCESSES``: a
    process's ``globalPid`` is the kernel's with its thread bits cleared)."""
    con = sqlite3.connect(f"file:{corpus_file(short)}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute(
            "SELECT DISTINCT p.pid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN PROCESSES p ON p.globalPid = (k.globalPid >> 24) << 24 ORDER BY 1")]
    finally:
        con.close()


def ring_2node_rank_logs(out: Path, pids: tuple[int, int] | None = None) -> list[Path]:
    """The per-rank NCCL logs (NCCL_DEBUG_FILE=%h.%p) the nccl-ring-2node exports' job would print: 2 ranks,
    rank 0 on ault43 and rank 1 on ault44, 2 channels over NET/Socket (planted: the corpus has the exports but
    not their log; the lines are NCCL 2.17's, as in the ault 2x2 log of the same cluster). Each rank's process
    id is the one its export recorded (``export_pids``), unless ``pids`` plants others (another run)."""
    if pids is None:
        [p0], [p1] = (export_pids(name) for name in RING_EXPORTS)
        pids = (p0, p1)
    paths = []
    for rank, host, pid, ip in ((0, "ault43", pids[0], "148.187.105.53"), (1, "ault44", pids[1], "148.187.105.54")):
        p = f"{host}:{pid}:{pid} [0] NCCL INFO "
        peer = 1 - rank
        lines = [f"{p}NCCL version 2.17.1+cuda11.8", f"{p}NET/Socket : Using [0]enp225s0f1:{ip}<0>",
                 f"{p}Using network Socket",
                 f"{p}ncclCommInitRank comm 0x55{rank} rank {rank} nranks 2 cudaDev 0 busId 41000 commId 0x5eed - Init START"]
        lines += [f"{p}Channel {c:02d}/02 :    0   1" for c in (0, 1)]
        for c in (0, 1):
            lines.append(f"{p}Channel {c:02d}/0 : {peer}[41000] -> {rank}[41000] [receive] via NET/Socket/0")
            lines.append(f"{p}Channel {c:02d}/0 : {rank}[41000] -> {peer}[41000] [send] via NET/Socket/0")
        lines.append(f"{p}comm 0x55{rank} rank {rank} nranks 2 cudaDev 0 busId 41000 commId 0x5eed - Init COMPLETE")
        path = out / f"{host}.{pid}.log"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


AULT = corpus_dir() / "nccl" / "ZhiyiHu1999__DistributedSysLab_FS24__ault-2x2-shm-socket-tree-simple-2.17.log"
AULT_RANK0_PID = 609484  # ault43's rank 0 in that log ("ault43:609484:609484 [0] ... rank 0 nranks 4 ... Init COMPLETE")


def ault_log_of_ring_rank0(text: str | None = None) -> str:
    """The corpus ault 2x2 log (``text``: an edited copy of it) with its rank 0's process (ault43:609484) made the
    process the nccl-ring-2node rank 0 export recorded (``export_pids``; planted: the corpus has no log of the
    exports' own run with its rank 0 in it, and rank 0's process is what joins a log to an export)."""
    [pid] = export_pids(RING_EXPORTS[0])
    text = AULT.read_text() if text is None else text
    assert f"ault43:{AULT_RANK0_PID}:" in text and f":{pid}:" not in text
    return text.replace(f"ault43:{AULT_RANK0_PID}:", f"ault43:{pid}:")
