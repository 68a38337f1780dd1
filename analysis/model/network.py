"""NCCL's network traffic: per report (its transfers by peer pair and channel) and per run (the rank x rank
communication matrix, grouped by node), from the ``net_transfers`` rows (``analysis.readers.nsys.net``).

A transfer is one (sender, receiver, channel, sequence) that NCCL posted: it calls ``ncclNetIsend`` (or
``ncclNetIrecv``) again with the same arguments until the network accepts the request, e.g. a send whose
receiver has not posted its receive yet, and each call is an NVTX event. Each ``net_transfers`` row is one
such call (an attempt); the completions survive on the rows they paired with. So here a transfer is the
attempts with the same (process, direction, peers, channel, sequence) up to and including the first
completion at or after them (an ASOF join), its ``post_ns`` the last attempt (the one accepted), its
``first_ns`` the first. Its bytes count once; its attempts are a count of their own.

Per report, in its analysis window (a transfer counts when it was accepted inside it): for each direction
(this rank's sends, its receives), peer pair and channel, the transfers and bytes, the attempts, those whose
completion was recorded, the summed time from post to completion and the time at least one of them was in
flight (the union of their post-to-completion intervals), and ``waiting_ns``: the time at least one was
retried before it was accepted (the union of first attempt to post), time this rank waited on its peer,
not time the network moved data. The achieved bandwidth is the completed bytes over the in-flight time.

Per run: the sender's side of each pair (the receiver's when the sender's report has no ranges), the hosts of
both ranks (intra- or inter-node), the slowest link (by bandwidth, which excludes the waiting), the ranks
their peers waited for (``waited_for``: a sender that retried waited for its receiver), and the same traffic
per node and per node pair (``nodes``, ``node_links``), where a pair without a link is ``no traffic`` when
either rank's report records network ranges and ``not recorded`` when neither does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TypedDict

from analysis.model.trace import Trace
from analysis.readers.nsys.net import source
from analysis.report_types import (
    ChannelTransfers,
    DirectionTransfers,
    PeerTransfers,
    ReportNetwork,
    TransferCounts,
)

NO_RANGES = ("no NCCL network ranges (ncclNetIsend/ncclNetIrecv NVTX events with their Data_Size arguments): "
             "this report does not record its network transfers (none crossed the network in it, or NCCL's "
             "network calls were not instrumented when it was captured), so none are shown or guessed")

_KEY = ("pid", "direction", "sender_rank", "receiver_rank", "channel", "sequence")


def transfers_sql(src: str) -> str:
    """One row per transfer (see the module): its key, ``bytes``, ``attempts``, ``first_ns``, ``post_ns``
    (the accepted attempt) and ``done_ns`` (NULL: no completion recorded)."""
    on = " AND ".join(f"a.{k} = c.{k}" for k in _KEY)
    keys = ", ".join(f"a.{k}" for k in _KEY)
    return f"""
        WITH a AS (SELECT * FROM {src} WHERE post_ns IS NOT NULL),
        c AS (SELECT {", ".join(_KEY)}, done_ns FROM {src} WHERE done_ns IS NOT NULL),
        j AS (SELECT {keys}, a.bytes, a.post_ns, c.done_ns FROM a ASOF LEFT JOIN c ON {on} AND c.done_ns >= a.post_ns)
        SELECT {", ".join(_KEY)}, done_ns, COUNT(*) AS attempts, MIN(post_ns) AS first_ns, MAX(post_ns) AS post_ns,
               arg_max(bytes, post_ns) AS bytes
        FROM j GROUP BY {", ".join(_KEY)}, done_ns"""  # noqa: S608 - column names and a table name


def _union(part: str, lo: str, hi: str, rel: str) -> str:
    """Per group of ``part``, the length of the union of the intervals [lo, hi) of ``rel``."""
    return f"""
        SELECT {part}, SUM(GREATEST(0, {hi} - GREATEST({lo}, COALESCE(before, {lo})))) AS u
        FROM (SELECT {part}, {lo}, {hi},
                     MAX({hi}) OVER (PARTITION BY {part} ORDER BY {lo}, {hi}
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
              FROM {rel} WHERE {hi} > {lo})
        GROUP BY ALL"""  # noqa: S608 - column names


def _grouped(src: str, keys: list[str], lo: int, hi: int) -> str:
    part = ", ".join(keys)
    return f"""
        WITH t AS (SELECT * FROM ({transfers_sql(src)}) WHERE post_ns >= {lo} AND post_ns < {hi}),
        d AS (SELECT * FROM t WHERE done_ns IS NOT NULL),
        g AS (SELECT {part}, COUNT(*) AS transfers, SUM(bytes) AS bytes, SUM(attempts) AS attempts FROM t GROUP BY ALL),
        f AS (SELECT {part}, COUNT(*) AS completed, SUM(bytes) AS completed_bytes,
                     SUM(done_ns - post_ns) AS post_to_done_ns, MEDIAN(done_ns - post_ns) AS median_ns
              FROM d GROUP BY ALL),
        fl AS ({_union(part, "post_ns", "done_ns", "d")}),
        w AS ({_union(part, "first_ns", "post_ns", "t")})
        SELECT g.{part.replace(", ", ", g.")}, g.transfers, g.bytes, COALESCE(f.completed, 0),
               COALESCE(f.completed_bytes, 0), COALESCE(f.post_to_done_ns, 0), COALESCE(fl.u, 0), f.median_ns,
               g.attempts, COALESCE(w.u, 0)
        FROM g LEFT JOIN f USING ({part}) LEFT JOIN fl USING ({part}) LEFT JOIN w USING ({part})
        ORDER BY {part}"""  # noqa: S608 - column names and integers


def _counts(r: tuple) -> TransferCounts:
    """A group's counts: the columns after its key columns in ``_grouped``'s rows."""
    transfers, nbytes, completed, cbytes, p2d, flight, median, attempts, waiting = r
    return {"transfers": int(transfers), "bytes": int(nbytes), "attempts": int(attempts),
            "retries": int(attempts) - int(transfers), "waiting_ns": int(waiting), "completed": int(completed),
            "completed_bytes": int(cbytes), "post_to_done_ns": int(p2d), "in_flight_ns": int(flight),
            "median_post_to_done_ns": None if median is None else int(median),
            "bandwidth_bps": bandwidth(int(cbytes), int(flight))}


def bandwidth(nbytes: int, ns: int) -> float | None:
    """Bytes per second, None without time."""
    return round(nbytes * 1e9 / ns, 1) if ns > 0 else None


def report_network(t: Trace, bounds: tuple[int, int] | None) -> ReportNetwork:
    """The report's ``network`` object: its transfers per peer pair and per channel (see the module)."""
    lo, hi = bounds if bounds is not None else (-(2**62), 2**62)
    src = source(t.tables)
    if t.scalar(f"SELECT 1 FROM {src} LIMIT 1") is None:  # noqa: S608 - a table name or constant SQL
        return {"has_ranges": False, "reason": NO_RANGES, "peers": [], "channels": [], "directions": {}}
    pair = ["direction", "sender_rank", "receiver_rank"]
    chans: list[ChannelTransfers] = [
        {"direction": r[0], "sender_rank": r[1], "receiver_rank": r[2], "channel": r[3], **_counts(r[4:])}
        for r in t.sql(_grouped(src, [*pair, "channel"], int(lo), int(hi)))]
    peers: list[PeerTransfers] = [
        {"direction": r[0], "sender_rank": r[1], "receiver_rank": r[2], **_counts(r[3:]),
         "channels": sum(1 for c in chans if (c["direction"], c["sender_rank"], c["receiver_rank"]) == tuple(r[:3]))}
        for r in t.sql(_grouped(src, pair, int(lo), int(hi)))]
    # per direction, all peers at once: the time at least one request of that direction was in flight
    sides: dict[str, DirectionTransfers] = {r[0]: {"direction": r[0], **_counts(r[1:])}
                                            for r in t.sql(_grouped(src, ["direction"], int(lo), int(hi)))}
    return {"has_ranges": True, "reason": None if peers else "no network transfer was posted in the analysis window",
            "peers": peers, "channels": chans, "directions": sides,
            "bytes_sent": sum(p["bytes"] for p in peers if p["direction"] == "send"),
            "bytes_received": sum(p["bytes"] for p in peers if p["direction"] == "recv")}


class Link(TypedDict):
    """One (sender, receiver) rank pair of the run's matrix: the hosts, whether it crosses nodes, whose report counted
    it (``seen_by``), its peer row's counts and whom the sender waited for."""

    sender: int
    receiver: int
    sender_host: str | None
    receiver_host: str | None
    inter_node: bool | None
    seen_by: str
    transfers: int
    bytes: int
    attempts: int
    retries: int
    waiting_ns: int
    completed_bytes: int
    in_flight_ns: int
    median_post_to_done_ns: int | None
    bandwidth_bps: float | None
    channels: int
    waiting_for: int | None


class WaitedFor(TypedDict):
    """A receiving rank its senders waited for (their retries), and who they are."""

    rank: int
    host: str | None
    waiting_ns: int
    by: list[int]


class Node(TypedDict):
    """One host of the matrix: its ranks (those whose report records ranges) and its bytes within and across nodes."""

    host: str | None
    ranks: list[int]
    ranks_recorded: list[int]
    intra_bytes: int
    sent_inter_bytes: int
    received_inter_bytes: int


class NodeLink(TypedDict):
    """An ordered host pair with links: their count, transfers, bytes, waiting and the slowest link's bandwidth."""

    sender_host: str | None
    receiver_host: str | None
    inter_node: bool | None
    links: int
    transfers: int
    bytes: int
    waiting_ns: int
    min_bandwidth_bps: float | None


class ByNode(TypedDict):
    nodes: list[Node]
    node_links: list[NodeLink]


class SlowestLink(TypedDict):
    sender: int
    receiver: int
    sender_host: str | None
    receiver_host: str | None
    bytes: int
    in_flight_ns: int
    bandwidth_bps: float | None
    waiting_ns: int


class NetworkMatrix(TypedDict):
    """The run's ``network``: NCCL's network transfers as a rank x rank matrix (``run_matrix``)."""

    ranks: list[int]
    hosts: dict[str, str | None]
    links: list[Link]
    inter_node_bytes: int
    intra_node_bytes: int
    unknown_node_bytes: int
    attempts: int
    transfers: int
    senders_across_nodes: list[int]
    without_ranges: list[int]
    waited_for: list[WaitedFor]
    nodes: list[Node]
    node_links: list[NodeLink]
    slowest: SlowestLink | None


def run_matrix(results: list[tuple[int | None, str | None, ReportNetwork | None]]) -> NetworkMatrix | None:
    """The run's communication matrix from each report's (rank, host, network object); None when no
    report records network ranges. One link per (sender, receiver) rank pair: the sender's report's
    count of it, else the receiver's."""
    hosts = {rank: host for rank, host, _ in results if rank is not None}
    with_ranges = [net for _, _, net in results if net and net.get("has_ranges")]
    if not with_ranges:
        return None
    links: dict[tuple[int, int], Link] = {}
    for side in ("send", "recv"):
        for net in with_ranges:
            for p in net["peers"]:
                key = (p["sender_rank"], p["receiver_rank"])
                if p["direction"] != side or key in links:
                    continue
                hs, hr = hosts.get(key[0]), hosts.get(key[1])
                links[key] = {  # its counts: the report's peer row's (0 where a stored row lacks one)
                    "sender": key[0], "receiver": key[1], "sender_host": hs, "receiver_host": hr,
                    "inter_node": None if hs is None or hr is None else hs != hr, "seen_by": side,
                    "transfers": p.get("transfers", 0), "bytes": p.get("bytes", 0),
                    "attempts": p.get("attempts", 0), "retries": p.get("retries", 0),
                    "waiting_ns": p.get("waiting_ns", 0), "completed_bytes": p.get("completed_bytes", 0),
                    "in_flight_ns": p.get("in_flight_ns", 0),
                    "median_post_to_done_ns": p.get("median_post_to_done_ns", 0),
                    "bandwidth_bps": p.get("bandwidth_bps", 0), "channels": p.get("channels", 0),
                    # a sender that retried waited for its receiver to post; a receiver's retries
                    # wait on its own side (buffers), so they name no peer
                    "waiting_for": key[1] if side == "send" and p.get("waiting_ns") else None}
    rows = sorted(links.values(), key=lambda r: (r["sender"], r["receiver"]))
    timed = [r for r in rows if r["bandwidth_bps"] is not None]
    slowest = min(timed, key=lambda r: (r["bandwidth_bps"], r["sender"], r["receiver"])) if timed else None
    recorded = sorted(k for k, _, net in results if k is not None and net is not None and net.get("has_ranges"))
    without = sorted(k for k, _, net in results if k is not None and not (net is not None and net.get("has_ranges")))
    ranks = sorted({k for r in rows for k in (r["sender"], r["receiver"])} | set(hosts))
    waited: dict[int, WaitedFor] = {}
    for r in rows:
        if r["waiting_for"] is not None:
            w = waited.setdefault(r["waiting_for"], {"rank": r["waiting_for"], "host": hosts.get(r["waiting_for"]),
                                                     "waiting_ns": 0, "by": []})
            w["waiting_ns"] += r["waiting_ns"]
            w["by"].append(r["sender"])
    by_node = _by_node(rows, hosts, set(recorded))
    return {"ranks": ranks, "hosts": {str(k): v for k, v in sorted(hosts.items())}, "links": rows,
            "inter_node_bytes": sum(r["bytes"] for r in rows if r["inter_node"] is True),
            "intra_node_bytes": sum(r["bytes"] for r in rows if r["inter_node"] is False),
            "unknown_node_bytes": sum(r["bytes"] for r in rows if r["inter_node"] is None),
            "attempts": sum(r["attempts"] for r in rows), "transfers": sum(r["transfers"] for r in rows),
            "senders_across_nodes": sorted({r["sender"] for r in rows if r["inter_node"]}),
            "without_ranges": without,
            "waited_for": sorted(waited.values(), key=lambda w: (-w["waiting_ns"], w["rank"])),
            "nodes": by_node["nodes"], "node_links": by_node["node_links"],
            "slowest": None if slowest is None else {
                "sender": slowest["sender"], "receiver": slowest["receiver"], "sender_host": slowest["sender_host"],
                "receiver_host": slowest["receiver_host"], "bytes": slowest["bytes"],
                "in_flight_ns": slowest["in_flight_ns"], "bandwidth_bps": slowest["bandwidth_bps"],
                "waiting_ns": slowest["waiting_ns"]}}


def link_status(sender: int, receiver: int, links: set[tuple[int, int]], recorded: set[int]) -> str:
    """``traffic``, ``no traffic`` (a report that would have recorded it records none) or ``not recorded``."""
    if (sender, receiver) in links:
        return "traffic"
    return "no traffic" if sender in recorded or receiver in recorded else "not recorded"


def _by_node(rows: list[Link], hosts: dict[int, str | None], recorded: set[int]) -> ByNode:
    """``nodes`` (per host: its ranks, bytes sent and received within it and to/from other nodes) and
    ``node_links`` (per ordered host pair with a link: bytes, transfers, links, the slowest link's bandwidth)."""
    ranks_of: dict[str | None, list[int]] = defaultdict(list)
    for rank, host in sorted(hosts.items()):
        ranks_of[host].append(rank)
    nodes: dict[str | None, Node] = {h: {"host": h, "ranks": rs, "ranks_recorded": [r for r in rs if r in recorded],
                 "intra_bytes": 0, "sent_inter_bytes": 0, "received_inter_bytes": 0}
             for h, rs in ranks_of.items()}
    pairs: dict[tuple[str | None, str | None], NodeLink] = {}
    for r in rows:
        hs, hr = r["sender_host"], r["receiver_host"]
        for h in (hs, hr):
            nodes.setdefault(h, {"host": h, "ranks": [], "ranks_recorded": [], "intra_bytes": 0,
                                 "sent_inter_bytes": 0, "received_inter_bytes": 0})
        if r["inter_node"] is False:
            nodes[hs]["intra_bytes"] += r["bytes"]
        elif r["inter_node"] is True:
            nodes[hs]["sent_inter_bytes"] += r["bytes"]
            nodes[hr]["received_inter_bytes"] += r["bytes"]
        p = pairs.setdefault((hs, hr), {"sender_host": hs, "receiver_host": hr, "inter_node": r["inter_node"],
                                        "links": 0, "transfers": 0, "bytes": 0, "waiting_ns": 0,
                                        "min_bandwidth_bps": None})
        p["links"] += 1
        p["transfers"] += r["transfers"]
        p["bytes"] += r["bytes"]
        p["waiting_ns"] += r["waiting_ns"]
        if r["bandwidth_bps"] is not None:
            p["min_bandwidth_bps"] = min(r["bandwidth_bps"], p["min_bandwidth_bps"] or r["bandwidth_bps"])
    return {"nodes": sorted(nodes.values(), key=lambda n: str(n["host"])),
            "node_links": sorted(pairs.values(), key=lambda p: (str(p["sender_host"]), str(p["receiver_host"])))}
