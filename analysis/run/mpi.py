"""Blocking MPI point-to-point calls between two ranks, each split into waiting for its peer and transfer.

nsys records MPI calls (``--trace=mpi``) as NVTX ranges named after the call (domain "MPI"), without the
peer, tag or size. A blocking ``MPI_Recv`` cannot complete before its message's sender has called
``MPI_Send``; a blocking send of a message too large to buffer cannot complete before the receiver has posted
its receive. So for each matched (send, receive), on the run's aligned clock:

- the receive waits from its own start until the send starts (``waited_for`` the sender): time the receiving
  rank spent waiting for the sender's work before the send, not communication;
- the send waits from its own start until the receive is posted (``waited_for`` the receiver); a send that
  returned before the receive was posted (buffered, eager) waited for nobody;
- each call's waiting is at most its own duration; its transfer is the rest (waiting + transfer = the call).

Matching premise: with no peer recorded, messages are matched only between exactly two ranks, in MPI's
non-overtaking order: the k-th send of A with the k-th receive of B. It holds when each side's count of
sends equals the other side's count of receives over the capture, and no matched receive ends before its
send began; otherwise the direction is not matched and the result says why. ``MPI_Sendrecv``, non-blocking
calls (``MPI_Isend``/``MPI_Irecv``/``MPI_Wait``) and collectives are not split.

Calls are counted in the totals when they start inside their own report's analysis window; matching uses
every call of the capture (a window would cut the order).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from analysis import fmt
from analysis.diagnosis.rules.nsys.run_nodes import CLOCK_SOURCE
from analysis.model.trace import Trace

MPI_FILE = "mpi.parquet"
SEND_CALLS = ("MPI_Send", "MPI_Ssend", "MPI_Rsend", "MPI_Bsend")
RECV_CALLS = ("MPI_Recv",)
CALL_RE = "^P?(MPI_(Send|Ssend|Rsend|Bsend|Recv))$"
LONGEST = 10


def write_mpi(trace: Trace, folder: Path) -> str | None:
    """The report's blocking MPI point-to-point calls (NVTX ranges named after them; a ``PMPI_`` name as its
    ``MPI_`` one) to ``folder/mpi.parquet``: ``pid, tid, name, start_ns, end_ns``. None when it has none."""
    if not trace.has_rows("nvtx") or trace.scalar(
            f"SELECT 1 FROM nvtx WHERE regexp_matches(text, '{CALL_RE}') LIMIT 1") is None:  # noqa: S608 - constant
        return None
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (MPI_FILE + ".tmp")
    quoted = str(tmp).replace("'", "''")  # a server-made path, quoted all the same
    trace.con.execute(f"""
        COPY (SELECT pid, tid, regexp_extract(text, '{CALL_RE}', 1) AS name, start_ns, end_ns FROM nvtx
              WHERE kind <> 'mark' AND end_ns IS NOT NULL AND end_ns >= start_ns AND regexp_matches(text, '{CALL_RE}')
              ORDER BY start_ns, pid, tid)
        TO '{quoted}' (FORMAT parquet)""")  # noqa: S608 - constants and a server-made path
    tmp.replace(folder / MPI_FILE)
    return MPI_FILE


def _direction(sends: np.ndarray, recvs: np.ndarray) -> str | None:
    """Why the k-th send cannot be matched with the k-th receive (rows: start, end on the aligned clock)."""
    if len(sends) != len(recvs):
        return f"{fmt.count(len(sends))} send(s) against {fmt.count(len(recvs))} receive(s) over the capture"
    bad = np.flatnonzero(recvs[:, 1] < sends[:, 0])
    if len(bad):
        return (f"receive #{int(bad[0]) + 1} ends before send #{int(bad[0]) + 1} begins ({len(bad)} such): the "
                "messages are not received in the order sent (tags, wildcards or calls outside the capture)")
    return None


def mpi_waits(calls: list[tuple[str, str | None, np.ndarray, np.ndarray, np.ndarray, tuple[int, int] | None]],
              ) -> dict[str, Any] | None:
    """``calls``: per MPI rank (participant), its name, host, call names, ``[start, end]`` rows on the run's
    aligned clock, the offset that turns them back into its own times (``own = aligned - offset``), as an
    array of one value, and its analysis window in its own times (None: all). Returns the split (see the
    module) or, with other than two ranks, why nothing is matched; None without MPI calls on two ranks."""
    if len(calls) < 2:
        return None
    if len(calls) > 2:
        return {"matched": 0, "per_rank": [], "reason": f"{len(calls)} ranks make MPI point-to-point calls and the "
                "export records no peer: messages are matched only between two ranks"}
    out_dirs: list[dict[str, Any]] = []
    waits: list[dict[str, Any]] = []
    per: list[dict[str, Any]] = [{"rank": c[0], "host": c[1], "calls": 0, "time_ns": 0, "wait_ns": 0, "transfer_ns": 0}
                                 for c in calls]
    whom: list[dict[str, int]] = [defaultdict(int) for _ in calls]
    for a, b in ((0, 1), (1, 0)):
        na, ta = calls[a][2], calls[a][3]
        nb, tb = calls[b][2], calls[b][3]
        sends, recvs = ta[np.isin(na, SEND_CALLS)], tb[np.isin(nb, RECV_CALLS)]
        why = _direction(sends, recvs) if len(sends) or len(recvs) else None
        out_dirs.append({"sender": calls[a][0], "receiver": calls[b][0], "sends": int(len(sends)),
                         "receives": int(len(recvs)), "matched": 0 if why or not len(sends) else int(len(sends)),
                         "reason": why})
        if why or not len(sends):
            continue
        for side, own, other, peer in ((a, sends, recvs, b), (b, recvs, sends, a)):
            dur = own[:, 1] - own[:, 0]
            wait = np.clip(other[:, 0] - own[:, 0], 0, dur)
            off, win = int(calls[side][4][0]), calls[side][5]
            start_own = own[:, 0] - off
            keep = np.ones(len(own), dtype=bool) if win is None else (start_own >= win[0]) & (start_own < win[1])
            p = per[side]
            p["calls"] += int(keep.sum())
            p["time_ns"] += int(dur[keep].sum())
            p["wait_ns"] += int(wait[keep].sum())
            p["transfer_ns"] += int((dur - wait)[keep].sum())
            if int(wait[keep].sum()):
                whom[side][calls[peer][0]] += int(wait[keep].sum())
            call = "send" if side == a else "receive"
            for k in np.flatnonzero(keep & (wait > 0)):
                waits.append({"rank": calls[side][0], "call": call, "message": int(k) + 1,
                              "start_ns": int(start_own[k]), "duration_ns": int(dur[k]), "wait_ns": int(wait[k]),
                              "waited_for": calls[peer][0], "transfer_ns": int(dur[k] - wait[k])})
    for p, w in zip(per, whom, strict=True):
        p["waited_for"] = dict(sorted(w.items(), key=lambda kv: -kv[1]))
    matched = sum(d["matched"] for d in out_dirs)
    total = sum(p["time_ns"] for p in per)
    caused: dict[str, int] = {str(c[0]): sum(w.get(c[0], 0) for w in whom) for c in calls}
    late = max(caused, key=lambda k: caused[k]) if matched else None
    critical = None
    if late is not None and caused[late] > 0 and total > 0:
        critical = {"rank": late, "host": next(c[1] for c in calls if c[0] == late), "others_wait_ns": caused[late],
                    "share_of_mpi_time_pct": round(100.0 * caused[late] / total, 3)}
    return {"matched": matched, "directions": out_dirs, "per_rank": per, "critical": critical,
            "longest_waits": sorted(waits, key=lambda w: (-w["wait_ns"], w["rank"], w["start_ns"]))[:LONGEST],
            "clock": CLOCK_SOURCE if len({c[1] for c in calls}) > 1 else "one host's clock",
            "matching": "the k-th send of one rank with the k-th receive of the other (MPI's non-overtaking "
                        "order; the export records no peer or tag)"}


def run_mpi(parts: list[tuple[str, str | None, Path, int, tuple[int, int] | None]], con: Any) -> dict[str, Any] | None:
    """``parts``: per nsys report with MPI calls, its name (``rank R`` or its label), host, ``mpi.parquet``,
    clock offset (``analysis.run.facts.offsets``) and window; a report holding several processes with MPI
    calls gives one participant per process (``name pid P``). The split of ``mpi_waits``."""
    calls = []
    for name, host, path, off, win in parts:
        rows = con.execute("SELECT pid, name, start_ns, end_ns FROM read_parquet(?) ORDER BY pid, start_ns, end_ns",
                           [str(path)]).fetchall()
        pids = sorted({r[0] for r in rows})
        for pid in pids:
            mine = [r for r in rows if r[0] == pid]
            who = name if len(pids) == 1 else f"{name} pid {pid}"
            calls.append((who, host, np.asarray([r[1] for r in mine], dtype=object),
                          np.asarray([[int(r[2]) + off, int(r[3]) + off] for r in mine], dtype=np.int64),
                          np.asarray([off], dtype=np.int64), win))
    return mpi_waits(calls)
