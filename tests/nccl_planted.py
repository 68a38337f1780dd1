"""Planted NCCL logs built at test time."""

from __future__ import annotations

from pathlib import Path


def ring_2node_rank_logs(out: Path) -> list[Path]:
    """The per-rank NCCL logs (NCCL_DEBUG_FILE=%h.%p) the nccl-ring-2node exports' job would print: 2 ranks,
    rank 0 on ault43 and rank 1 on ault44, 2 channels over NET/Socket (planted: the corpus has the exports but
    not their log; the lines are NCCL 2.17's, as in the ault 2x2 log of the same cluster)."""
    paths = []
    for rank, host, pid, ip in ((0, "ault43", 1701, "148.187.105.53"), (1, "ault44", 1801, "148.187.105.54")):
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
