"""MPI calls across ranks, each split into waiting for another rank and transfer.

What the exports record: nsys' MPI trace of the corpus' versions (2021.5-2022.2) is NVTX ranges named after the
call (domain "MPI": ``MPI_Init``, ``MPI_Send``, ``MPI_Recv``, ...), without peer, tag, size, communicator or
request. No corpus export has the dedicated ``MPI_*`` tables of newer nsys (which carry peers), so nothing
here reads them: every match below is by order, and its premise is checked on the calls.

**Collectives** (``MPI_Barrier``, ``MPI_Allreduce``, ``MPI_Bcast``, ...): the k-th call of a name on every
rank that makes it is one instance, when those ranks make it equally often over the capture (else the name is
left out: sub-communicators or calls outside the capture). Per instance and rank, on the run's aligned clock:
a rank cannot leave before the ranks it needs arrive, and it cannot have waited for a rank that arrived after
it left (a non-root of a reduce that returns early). So a rank's **waiting** runs from its own arrival to the
latest arrival among the ranks that arrived before it left (named: ``waited_for``), its **transfer** is the
rest of its call; the instance's last-arriving rank is named too.

**Point-to-point**, between exactly two ranks (with more, a send's receiver cannot be told without a peer:
those calls are left out and said so). Sends (``MPI_Send``/``Ssend``/``Rsend``/``Bsend``, ``MPI_Isend``...,
``MPI_Sendrecv``) of one rank pair with the receives (``MPI_Recv``, ``MPI_Irecv``, ``MPI_Sendrecv``) of the
other, k-th with k-th in the order posted (MPI's non-overtaking order). A non-blocking call only posts: its
message completes in the ``MPI_Wait``/``MPI_Waitany`` (the oldest request still open on that rank) or
``MPI_Waitall`` (every open request) that follows it: the wait is in that call. Per completing call (the
blocking call itself, the Sendrecv, or the Wait): **waiting** runs from its start to the latest post of a
peer's matching call that began before it ended (a receive cannot complete before its send is posted; a
rendezvous send not before its receive is; a send that returned before the receive was posted waited for
nobody), at most the call; **transfer** is the rest. Posting calls (``MPI_Isend``/``MPI_Irecv``) are
transfer only. The premise is checked per direction: as many sends as receives over the capture, every
request completed by a later wait, no receive completed before its send was posted; a direction that fails
is not split and says why.

Calls not split are listed with the reason (``left_out``). Calls are counted in the totals when they start
inside their own report's analysis window; matching uses every call of the capture (a window would cut the
order). The waiting is also returned as intervals per rank (its own clock), for HOST003's impact.
"""

from __future__ import annotations

from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import numpy as np

from analysis import fmt
from analysis.diagnosis.rules.nsys.run_nodes import CLOCK_SOURCE
from analysis.model.trace import Trace
from analysis.report_types import (
    MpiCollective,
    MpiCritical,
    MpiDirection,
    MpiItem,
    MpiLeftOut,
    MpiRankSplit,
    MpiSplit,
    MpiWait,
)

MPI_FILE = "mpi.parquet"
MPI_IDLE_FILE = "mpi_idle.npy"
BLOCKING_SEND = ("MPI_Send", "MPI_Ssend", "MPI_Rsend", "MPI_Bsend")
BLOCKING_RECV = ("MPI_Recv",)
SENDRECV = ("MPI_Sendrecv", "MPI_Sendrecv_replace")
ISEND = ("MPI_Isend", "MPI_Issend", "MPI_Irsend", "MPI_Ibsend")
IRECV = ("MPI_Irecv",)
WAIT_ONE = ("MPI_Wait", "MPI_Waitany")
WAIT_ALL = ("MPI_Waitall",)
SEND_POSTS = BLOCKING_SEND + ISEND + SENDRECV
RECV_POSTS = BLOCKING_RECV + IRECV + SENDRECV
POSTS = BLOCKING_SEND + BLOCKING_RECV + SENDRECV + ISEND + IRECV
P2P = POSTS + WAIT_ONE + WAIT_ALL
COLLECTIVES = ("MPI_Barrier", "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce", "MPI_Gather", "MPI_Gatherv",
               "MPI_Allgather", "MPI_Allgatherv", "MPI_Scatter", "MPI_Scatterv", "MPI_Alltoall", "MPI_Alltoallv",
               "MPI_Alltoallw", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block", "MPI_Scan", "MPI_Exscan")
# Communication calls this module does not split (listed in ``left_out`` with why): tests and partial
# waits, probes, persistent and one-sided calls, non-blocking collectives.
OTHER_COMM = ("MPI_Test", "MPI_Testall", "MPI_Testany", "MPI_Testsome", "MPI_Waitsome", "MPI_Probe", "MPI_Iprobe",
              "MPI_Mprobe", "MPI_Improbe", "MPI_Mrecv", "MPI_Imrecv", "MPI_Start", "MPI_Startall", "MPI_Put",
              "MPI_Get", "MPI_Accumulate", "MPI_Win_fence", "MPI_Win_wait", "MPI_Win_complete", "MPI_Win_lock",
              "MPI_Win_unlock", "MPI_Win_flush") + tuple("MPI_I" + c[4].lower() + c[5:] for c in COLLECTIVES)
CALL_RE = "^P?(MPI_[A-Za-z_]+)$"
LONGEST = 10
ITEMS = 50

_OTHER_WHY = "not split: a test, partial wait, probe, persistent, one-sided or non-blocking collective call"


def write_mpi(trace: Trace, folder: Path, window: Trace | None = None) -> str | None:
    """The report's MPI calls (NVTX ranges named after them; a ``PMPI_`` name as its ``MPI_`` one) to
    ``folder/mpi.parquet``: ``pid, tid, name, start_ns, end_ns``; and, from ``window`` (the analysis window's
    view, default ``trace``), the GPU idle inside them (``mpi_idle``). None when it has none."""
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
    mpi_idle(window if window is not None else trace, folder)
    return MPI_FILE


def union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint pieces covering the intervals ``[s, e)``."""
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.r_[True, s[1:] > reach[:-1]]
    idx = np.flatnonzero(first)
    return s[idx], np.r_[reach[idx[1:] - 1], reach[-1]]


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two sets of sorted disjoint pieces."""
    (as_, ae), (bs, be) = a, b
    out_s, out_e = [], []
    i = j = 0
    while i < len(as_) and j < len(bs):
        lo, hi = max(int(as_[i]), int(bs[j])), min(int(ae[i]), int(be[j]))
        if hi > lo:
            out_s.append(lo)
            out_e.append(hi)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return np.asarray(out_s, dtype=np.int64), np.asarray(out_e, dtype=np.int64)


def _minus(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``a`` less ``b`` (both sorted disjoint pieces)."""
    (as_, ae), (bs, be) = a, b
    out_s, out_e = [], []
    j = 0
    for s, e in zip(as_.tolist(), ae.tolist(), strict=True):
        while j < len(bs) and be[j] <= s:
            j += 1
        k, cur = j, s
        while k < len(bs) and bs[k] < e:
            if bs[k] > cur:
                out_s.append(cur)
                out_e.append(int(bs[k]))
            cur = max(cur, int(be[k]))
            k += 1
        if cur < e:
            out_s.append(cur)
            out_e.append(e)
    return np.asarray(out_s, dtype=np.int64), np.asarray(out_e, dtype=np.int64)


def mpi_idle(v: Trace, folder: Path) -> None:
    """The GPU idle of each process's devices inside its MPI calls (``folder/mpi_idle.npy``: ``pid, start_ns,
    end_ns``, own clock, in ``v``'s window): the idle pieces (``unit_gaps`` and the idle under profiler overhead)
    inside an MPI range of the threads that launch the device's work, less their CUDA calls: the instants the
    idle anatomy paints ``mpi`` (a CUDA call is the only category before it that a thread inside a blocking MPI
    call can be in), i.e. HOST003's. Per device, so a process on two devices counts both (as HOST003 does)."""
    from analysis.diagnosis.idle_anatomy import (
        speakers,  # the anatomy's own notion of who speaks for a device
    )
    from analysis.model.activity import unit_gaps

    rows: list[tuple[int, int, int]] = []
    sp = speakers(v)
    for ug in unit_gaps(v):
        pid, tids = ug.unit.pid, sp.get((ug.unit.pid, ug.unit.device)) if ug.unit.pid is not None else None
        if pid is None or not tids or not len(ug.gap_start):
            continue
        xs, xe = ug.idle_under_busy()
        idle = union(np.r_[ug.gap_start, xs].astype(np.int64), np.r_[ug.gap_end, xe].astype(np.int64))
        lo, hi = int(idle[0][0]), int(idle[1][-1])
        where = f"pid = {int(pid)} AND tid IN ({', '.join(str(int(t)) for t in tids)}) AND start_ns < {hi} AND end_ns > {lo}"
        m = v.arrays(f"SELECT start_ns, end_ns FROM nvtx WHERE kind <> 'mark' AND end_ns IS NOT NULL AND "  # noqa: S608
                     f"regexp_matches(text, '{CALL_RE}') AND {where}")
        if not len(m["start_ns"]):
            continue
        inside = intersect(idle, union(m["start_ns"].astype(np.int64), m["end_ns"].astype(np.int64)))
        if v.has_rows("cuda_api"):
            c = v.arrays(f"SELECT start_ns, end_ns FROM cuda_api WHERE {where}")  # noqa: S608 - integers
            inside = _minus(inside, union(c["start_ns"].astype(np.int64), c["end_ns"].astype(np.int64)))
        rows += [(int(pid), s, e) for s, e in zip(inside[0].tolist(), inside[1].tolist(), strict=True)]
    tmp = folder / (MPI_IDLE_FILE + ".tmp.npy")
    np.save(tmp, np.asarray(rows, dtype=np.int64).reshape(-1, 3), allow_pickle=False)
    tmp.replace(folder / MPI_IDLE_FILE)


def read_mpi_idle(path: Path) -> np.ndarray:
    """``mpi_idle``'s rows: ``pid, start_ns, end_ns`` (own clock)."""
    return np.load(path, allow_pickle=False)


class _Rank:
    """One participant's calls (aligned clock) and, per call, its split."""

    def __init__(self, who: str, host: str | None, names: np.ndarray, rows: np.ndarray, off: int,
                 win: tuple[int, int] | None) -> None:
        self.who, self.host, self.names, self.rows, self.off = who, host, names, rows, off
        n = len(names)
        self.wait = np.zeros(n, dtype=np.int64)
        self.by = np.full(n, -1, dtype=np.int64)  # the participant waited for
        self.kind = np.zeros(n, dtype=np.int8)  # 0 not split, 1 point-to-point, 2 collective
        self.why: dict[int, str] = {}
        own = rows[:, 0] - off if n else np.zeros(0, dtype=np.int64)
        self.keep = np.ones(n, dtype=bool) if win is None else (own >= win[0]) & (own < win[1])

    def idx(self, names: tuple[str, ...]) -> np.ndarray:
        return np.flatnonzero(np.isin(self.names, names)) if len(self.names) else np.zeros(0, dtype=np.int64)


def _split_call(r: _Rank, i: int, needs: list[tuple[int, int]], kind: int) -> None:
    """Call ``i`` of ``r`` waits for the latest of ``needs`` ((aligned start, participant)) that began before it
    ended, from its own start, at most its duration."""
    s, e = int(r.rows[i, 0]), int(r.rows[i, 1])
    before = [(t, p) for t, p in needs if t < e]
    t, p = max(before) if before else (s, -1)
    r.wait[i] = min(max(t - s, 0), e - s)
    r.by[i] = p if r.wait[i] > 0 else -1
    r.kind[i] = kind


def _collectives(ranks: list[_Rank]) -> list[MpiCollective]:
    """Split each matched collective instance (module doc); one entry per collective name."""
    out = []
    for name in COLLECTIVES:
        idx = [r.idx((name,)) for r in ranks]
        members = [k for k in range(len(ranks)) if len(idx[k])]
        if not members:
            continue
        counts = {ranks[k].who: len(idx[k]) for k in members}
        why = None
        if len(members) < 2:
            why = (f"only {ranks[members[0]].who} makes it in the capture: the other ranks' calls are outside it "
                   "or in another communicator")
        elif len(set(counts.values())) > 1:
            why = ("made " + ", ".join(f"{w} x{c}" for w, c in counts.items()) + ": the instances cannot be paired "
                   "in order (sub-communicators or calls outside the capture)")
        entry: MpiCollective = {"call": name, "ranks": [ranks[k].who for k in members], "instances": 0,
                                "reason": why, "last_arrivals": {}}
        out.append(entry)
        if why:
            for k in members:
                for i in idx[k].tolist():
                    ranks[k].why[i] = why
            continue
        arr = np.stack([ranks[k].rows[idx[k], 0] for k in members])  # (members, instances)
        last = arr.argmax(axis=0)
        entry["instances"] = int(arr.shape[1])
        entry["last_arrivals"] = {ranks[members[j]].who: int((last == j).sum()) for j in sorted(set(last.tolist()))}
        for k in members:
            for n, i in enumerate(idx[k].tolist()):
                _split_call(ranks[k], i, [(int(arr[m, n]), members[m]) for m in range(len(members))], 2)
    return out


def _requests(r: _Rank) -> tuple[dict[int, int], list[int], list[int]]:
    """Which call completes each post of ``r`` (blocking calls and Sendrecv themselves; a non-blocking post the
    wait that follows it, see the module), the posts never completed, and the waits with no request open."""
    done: dict[int, int] = {}
    open_: deque[int] = deque()
    idle_waits = []
    for i in r.idx(P2P).tolist():
        name = r.names[i]
        if name in ISEND or name in IRECV:
            open_.append(i)
        elif name in WAIT_ONE or name in WAIT_ALL:
            if not open_:
                idle_waits.append(i)
            while open_:
                done[open_.popleft()] = i
                if name in WAIT_ONE:
                    break
        else:
            done[i] = i
    return done, list(open_), idle_waits


def _point_to_point(ranks: list[_Rank]) -> tuple[list[MpiDirection], int, str | None]:
    """Match and split the point-to-point calls between two ranks (module doc): the directions, the messages
    matched, and why nothing was matched (other than two ranks)."""
    members = [k for k, r in enumerate(ranks) if len(r.idx(POSTS))]
    if len(members) != 2:
        if not members:
            return [], 0, None
        apart = (f"{fmt.count(len(members))} ranks make MPI point-to-point calls and the exports record no peer (nsys' MPI "
               "trace here is NVTX ranges named after the call): a send's receiver cannot be told"
               if len(members) > 2 else
               f"only {ranks[members[0]].who} makes point-to-point calls in the capture: its peers' are not recorded")
        for k in members:
            for i in ranks[k].idx(P2P).tolist():
                ranks[k].why[i] = apart
        return [], 0, apart
    reqs = {k: _requests(ranks[k]) for k in members}
    for k in members:
        for i in reqs[k][2]:
            ranks[k].why[i] = "no request of this rank was open when it was called"
    needs: dict[int, dict[int, list[tuple[int, int]]]] = {k: defaultdict(list) for k in members}
    ok_posts: dict[int, set[int]] = {k: set() for k in members}
    dirs: list[MpiDirection] = []
    matched = 0
    for a, b in ((members[0], members[1]), (members[1], members[0])):
        ra, rb = ranks[a], ranks[b]
        sends, recvs = ra.idx(SEND_POSTS), rb.idx(RECV_POSTS)
        done_a, done_b = reqs[a][0], reqs[b][0]
        why: str | None = None
        if len(sends) != len(recvs):
            why = f"{fmt.count(len(sends))} send(s) against {fmt.count(len(recvs))} receive(s) over the capture"
        elif any(int(i) not in done_a for i in sends) or any(int(i) not in done_b for i in recvs):
            n = sum(int(i) not in done_a for i in sends) + sum(int(i) not in done_b for i in recvs)
            why = f"{fmt.count(n)} non-blocking request(s) with no MPI_Wait/MPI_Waitall after them in the capture"
        else:
            bad = [k for k, (s, r) in enumerate(zip(sends.tolist(), recvs.tolist(), strict=True))
                   if rb.rows[done_b[r], 1] < ra.rows[s, 0]]
            if bad:
                why = (f"receive #{bad[0] + 1} completes before send #{bad[0] + 1} is posted ({fmt.count(len(bad))} such): the "
                       "messages are not received in the order sent (tags, wildcards or calls outside the capture)")
        dirs.append({"sender": ra.who, "receiver": rb.who, "sends": int(len(sends)), "receives": int(len(recvs)),
                     "matched": 0 if why else int(len(sends)), "reason": why})
        if why or not len(sends):
            for k, posts in ((a, sends), (b, recvs)):
                for i in posts.tolist():
                    ranks[k].why[i] = f"{ra.who} -> {rb.who} not matched: {why}"
            continue
        matched += int(len(sends))
        for s, r in zip(sends.tolist(), recvs.tolist(), strict=True):
            needs[a][done_a[s]].append((int(rb.rows[r, 0]), b))  # a send waits for its receive to be posted
            needs[b][done_b[r]].append((int(ra.rows[s, 0]), a))  # a receive for its send
            ok_posts[a].add(s)
            ok_posts[b].add(r)
    for k in members:
        r = ranks[k]
        done = reqs[k][0]
        by_completer: dict[int, list[int]] = defaultdict(list)
        for post, c in done.items():
            by_completer[c].append(post)
        for c, completed in by_completer.items():
            blocked = next((r.why[p] for p in completed if p not in ok_posts[k]), None)
            if blocked is not None:
                r.why.setdefault(c, blocked)
                continue
            _split_call(r, c, needs[k][c], 1)
            for p in completed:  # a non-blocking post only posts: its own time is transfer
                if p != c:
                    r.kind[p] = 1
    return dirs, matched, None



def mpi_waits(calls: list[tuple[str, str | None, np.ndarray, np.ndarray, np.ndarray, tuple[int, int] | None]],
              ) -> tuple[MpiSplit | None, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``calls``: per MPI rank (participant), its name, host, call names, ``[start, end]`` rows on the run's
    aligned clock, the offset that turns them back into its own times (``own = aligned - offset``), as an
    array of one value, and its analysis window in its own times (None: all). Returns the split (see the
    module), None without MPI calls on two ranks, and per participant its waiting as intervals on its own clock
    (calls in its window)."""
    if len(calls) < 2:
        return None, {}
    ranks = [_Rank(c[0], c[1], c[2], c[3], int(c[4][0]), c[5]) for c in calls]
    colls = _collectives(ranks)
    dirs, matched, reason = _point_to_point(ranks)
    per: list[MpiRankSplit] = []
    waits: list[MpiWait] = []
    left: list[MpiLeftOut] = []
    intervals: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for r in ranks:
        split = (r.kind > 0) & r.keep
        whom: dict[str, int] = defaultdict(int)
        for p in np.unique(r.by[split & (r.by >= 0)]).tolist():
            whom[ranks[p].who] = int(r.wait[split & (r.by == p)].sum())
        dur = r.rows[:, 1] - r.rows[:, 0] if len(r.rows) else np.zeros(0, dtype=np.int64)
        # All the split calls, then the point-to-point and the collective ones: calls, time, waiting, transfer.
        (a, at, aw, ax), (p, pt, pw, px), (c, ct, cw, cx) = (
            (int(mask.sum()), int(dur[mask].sum()), int(r.wait[mask].sum()), int((dur - r.wait)[mask].sum()))
            for mask in (split, split & (r.kind == 1), split & (r.kind == 2)))
        per.append({"rank": r.who, "host": r.host, "calls": a, "time_ns": at, "wait_ns": aw, "transfer_ns": ax,
                    "point_to_point_calls": p, "point_to_point_time_ns": pt, "point_to_point_wait_ns": pw,
                    "point_to_point_transfer_ns": px, "collective_calls": c, "collective_time_ns": ct,
                    "collective_wait_ns": cw, "collective_transfer_ns": cx,
                    "waited_for": dict(sorted(whom.items(), key=lambda kv: -kv[1]))})
        w = np.flatnonzero(split & (r.wait > 0))
        own = r.rows[:, 0] - r.off if len(r.rows) else np.zeros(0, dtype=np.int64)
        intervals[r.who] = (own[w], own[w] + r.wait[w])
        seen: dict[str, int] = defaultdict(int)
        nth = np.zeros(len(r.names), dtype=np.int64)
        for i, name in enumerate(r.names.tolist()):
            seen[name] += 1
            nth[i] = seen[name]
        waits += [{"rank": r.who, "call": str(r.names[i]), "kind": "collective" if r.kind[i] == 2 else "point-to-point",
                   "occurrence": int(nth[i]), "start_ns": int(own[i]), "duration_ns": int(dur[i]),
                   "wait_ns": int(r.wait[i]), "waited_for": ranks[int(r.by[i])].who,
                   "transfer_ns": int(dur[i] - r.wait[i])} for i in w.tolist()]
        out_of: dict[tuple[str, str], int] = defaultdict(int)
        for i, why in r.why.items():
            if r.keep[i] and r.kind[i] == 0:
                out_of[(str(r.names[i]), why)] += 1
        for i in (np.flatnonzero(np.isin(r.names, OTHER_COMM) & r.keep).tolist() if len(r.names) else []):
            out_of[(str(r.names[i]), _OTHER_WHY)] += 1
        left += [{"rank": r.who, "call": n, "calls": c, "reason": why} for (n, why), c in sorted(out_of.items())]
    instances = sum(c["instances"] for c in colls)
    if not matched and not instances and not left:
        return None, {}
    total = sum(p["time_ns"] for p in per)
    caused = {r.who: sum(int(o.wait[(o.kind > 0) & o.keep & (o.by == k)].sum()) for o in ranks)
              for k, r in enumerate(ranks)}
    late = max(caused, key=lambda k: caused[k]) if caused else None
    critical: MpiCritical | None = None
    if late is not None and caused[late] > 0 and total > 0:
        critical = {"rank": late, "host": next(r.host for r in ranks if r.who == late), "others_wait_ns": caused[late],
                    "share_of_mpi_time_pct": round(100.0 * caused[late] / total, 3)}
    out: MpiSplit = {"matched": matched, "instances": instances, "reason": reason, "directions": dirs, "collectives": colls,
                     "collective_items": _items(ranks), "per_rank": per, "critical": critical, "left_out": left,
                     "longest_waits": sorted(waits, key=lambda w: (-w["wait_ns"], w["rank"], w["start_ns"]))[:LONGEST],
                     "clock": CLOCK_SOURCE if len({r.host for r in ranks}) > 1 else "one host's clock",
                     "matching": "point-to-point: the k-th send of one rank with the k-th receive of the other, the wait in "
                                 "the call that completes it; collectives: the k-th call of a name on every rank (the export "
                                 "records no peer, tag, communicator or request)"}
    return out, intervals


def _items(ranks: list[_Rank]) -> list[MpiItem]:
    """The first ``ITEMS`` collective instances (in arrival order): each rank's arrival (own clock), wait, whom it
    waited for and transfer, and the last rank to arrive."""
    inst: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for k, r in enumerate(ranks):
        seen: dict[str, int] = defaultdict(int)
        for i, name in enumerate(r.names.tolist()):
            seen[name] += 1
            if r.kind[i] == 2:
                inst[(name, seen[name])].append((k, i))
    rows = sorted(inst.items(), key=lambda kv: min(int(ranks[k].rows[i, 0]) for k, i in kv[1]))[:ITEMS]
    out: list[MpiItem] = []
    for (name, n), members in rows:
        last = max(members, key=lambda m: int(ranks[m[0]].rows[m[1], 0]))
        out.append({"call": name, "instance": n, "last_rank": ranks[last[0]].who,
                    "ranks": [{"rank": ranks[k].who, "start_ns": int(ranks[k].rows[i, 0] - ranks[k].off),
                               "duration_ns": int(ranks[k].rows[i, 1] - ranks[k].rows[i, 0]),
                               "wait_ns": int(ranks[k].wait[i]),
                               "waited_for": ranks[int(ranks[k].by[i])].who if ranks[k].by[i] >= 0 else None,
                               "transfer_ns": int(ranks[k].rows[i, 1] - ranks[k].rows[i, 0] - ranks[k].wait[i])}
                              for k, i in members]})
    return out


def run_mpi(parts: list[tuple[str, str | None, Path, int, tuple[int, int] | None]], con: Any,
            ) -> tuple[MpiSplit | None, dict[str, tuple[int, np.ndarray, np.ndarray]]]:
    """``parts``: per nsys report with MPI calls, its name (``rank R`` or its label), host, ``mpi.parquet``,
    clock offset (``analysis.run.facts.offsets``) and window; a report holding several processes with MPI
    calls gives one participant per process (``name pid P``). The split of ``mpi_waits`` and, per participant,
    its waiting intervals (own clock) with the pid they belong to."""
    calls = []
    pid_of: dict[str, int] = {}
    for name, host, path, off, win in parts:
        rows = con.execute("SELECT pid, name, start_ns, end_ns FROM read_parquet(?) ORDER BY pid, start_ns, end_ns",
                           [str(path)]).fetchall()
        pids = sorted({r[0] for r in rows})
        for pid in pids:
            mine = [r for r in rows if r[0] == pid]
            who = name if len(pids) == 1 else f"{name} pid {pid}"
            pid_of[who] = int(pid)
            calls.append((who, host, np.asarray([r[1] for r in mine], dtype=object),
                          np.asarray([[int(r[2]) + off, int(r[3]) + off] for r in mine], dtype=np.int64).reshape(-1, 2),
                          np.asarray([off], dtype=np.int64), win))
    split, waits = mpi_waits(calls)
    return split, {who: (pid_of[who], s, e) for who, (s, e) in waits.items()}
