"""NCCL's network traffic: per report (its transfers by peer pair and channel) and per run (the rank x rank
communication matrix), from the ``net_transfers`` rows (``analysis.readers.nsys.net``).

Per report, in its analysis window (a transfer counts when it was posted inside it): for each direction
(this rank's sends, its receives), peer pair and channel, the transfers and bytes posted, those whose
completion was recorded, the summed time from post to completion and the time at least one of them was
in flight (the union of their post-to-completion intervals). The achieved bandwidth is the completed
bytes over that in-flight time: what the link moved while it had work, never diluted by idle time and
never inflated by counting overlapping requests twice.

Per run: the sender's side of each pair (the receiver's when the sender's report has no ranges), the
hosts of both ranks (intra- or inter-node), and the slowest link.
"""

from __future__ import annotations

from typing import Any

from analysis.model.trace import Trace
from analysis.readers.nsys.net import source

NO_RANGES = ("no NCCL network ranges (ncclNetIsend/ncclNetIrecv NVTX events with their Data_Size arguments): "
             "this report does not record its network transfers (none crossed the network in it, or NCCL's "
             "network calls were not instrumented when it was captured), so none are shown or guessed")


def _grouped(src: str, keys: list[str], lo: int, hi: int) -> str:
    part = ", ".join(keys)
    return f"""
        WITH t AS (SELECT * FROM {src} WHERE post_ns >= {lo} AND post_ns < {hi}),
        d AS (SELECT {part}, bytes, post_ns, done_ns,
                     MAX(done_ns) OVER (PARTITION BY {part} ORDER BY post_ns, done_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
              FROM t WHERE done_ns IS NOT NULL)
        SELECT g.*, COALESCE(f.completed, 0), COALESCE(f.completed_bytes, 0), COALESCE(f.post_to_done_ns, 0),
               COALESCE(f.in_flight_ns, 0), f.median_ns
        FROM (SELECT {part}, COUNT(*) AS transfers, SUM(bytes) AS bytes FROM t GROUP BY ALL) g
        LEFT JOIN (SELECT {part}, COUNT(*) AS completed, SUM(bytes) AS completed_bytes,
                          SUM(done_ns - post_ns) AS post_to_done_ns,
                          SUM(GREATEST(0, done_ns - GREATEST(post_ns, COALESCE(before, post_ns)))) AS in_flight_ns,
                          MEDIAN(done_ns - post_ns) AS median_ns
                   FROM d GROUP BY ALL) f USING ({part})
        ORDER BY {part}"""  # noqa: S608 - column names and integers


def _row(keys: list[str], r: tuple) -> dict[str, Any]:
    out: dict[str, Any] = dict(zip(keys, r[:len(keys)], strict=True))
    transfers, nbytes, completed, cbytes, p2d, flight, median = r[len(keys):]
    out.update({"transfers": int(transfers), "bytes": int(nbytes), "completed": int(completed),
                "completed_bytes": int(cbytes), "post_to_done_ns": int(p2d), "in_flight_ns": int(flight),
                "median_post_to_done_ns": None if median is None else int(median),
                "bandwidth_bps": bandwidth(int(cbytes), int(flight))})
    return out


def bandwidth(nbytes: int, ns: int) -> float | None:
    """Bytes per second, None without time."""
    return round(nbytes * 1e9 / ns, 1) if ns > 0 else None


def report_network(t: Trace, bounds: tuple[int, int] | None) -> dict[str, Any]:
    """The report's ``network`` object: its transfers per peer pair and per channel (see the module)."""
    lo, hi = bounds if bounds is not None else (-(2**62), 2**62)
    src = source(t.tables)
    if t.scalar(f"SELECT 1 FROM {src} LIMIT 1") is None:  # noqa: S608 - a table name or constant SQL
        return {"has_ranges": False, "reason": NO_RANGES, "peers": [], "channels": [], "directions": {}}
    pair = ["direction", "sender_rank", "receiver_rank"]
    peers = [_row(pair, r) for r in t.sql(_grouped(src, pair, int(lo), int(hi)))]
    chans = [_row([*pair, "channel"], r) for r in t.sql(_grouped(src, [*pair, "channel"], int(lo), int(hi)))]
    for p in peers:
        p["channels"] = sum(1 for c in chans if all(c[k] == p[k] for k in pair))
    # per direction, all peers at once: the time at least one request of that direction was in flight
    sides = {r["direction"]: r for r in (_row(["direction"], x) for x in t.sql(_grouped(src, ["direction"], int(lo), int(hi))))}
    return {"has_ranges": True, "reason": None if peers else "no network transfer was posted in the analysis window",
            "peers": peers, "channels": chans, "directions": sides,
            "bytes_sent": sum(p["bytes"] for p in peers if p["direction"] == "send"),
            "bytes_received": sum(p["bytes"] for p in peers if p["direction"] == "recv")}


def run_matrix(results: list[tuple[int | None, str | None, dict[str, Any] | None]]) -> dict[str, Any] | None:
    """The run's communication matrix from each report's (rank, host, network object); None when no
    report records network ranges. One link per (sender, receiver) rank pair: the sender's report's
    count of it, else the receiver's."""
    hosts = {rank: host for rank, host, _ in results if rank is not None}
    with_ranges = [net for _, _, net in results if net and net.get("has_ranges")]
    if not with_ranges:
        return None
    links: dict[tuple[int, int], dict[str, Any]] = {}
    for side in ("send", "recv"):
        for net in with_ranges:
            for p in net["peers"]:
                key = (p["sender_rank"], p["receiver_rank"])
                if p["direction"] != side or key in links:
                    continue
                hs, hr = hosts.get(key[0]), hosts.get(key[1])
                links[key] = {"sender": key[0], "receiver": key[1], "sender_host": hs, "receiver_host": hr,
                              "inter_node": None if hs is None or hr is None else hs != hr, "seen_by": side,
                              **{k: p[k] for k in ("transfers", "bytes", "completed_bytes", "in_flight_ns",
                                                   "median_post_to_done_ns", "bandwidth_bps", "channels")}}
    rows = sorted(links.values(), key=lambda r: (r["sender"], r["receiver"]))
    timed = [r for r in rows if r["bandwidth_bps"] is not None]
    slowest = min(timed, key=lambda r: (r["bandwidth_bps"], r["sender"], r["receiver"])) if timed else None
    ranks = sorted({k for r in rows for k in (r["sender"], r["receiver"])} | set(hosts))
    return {"ranks": ranks, "hosts": {str(k): v for k, v in sorted(hosts.items())}, "links": rows,
            "inter_node_bytes": sum(r["bytes"] for r in rows if r["inter_node"] is True),
            "intra_node_bytes": sum(r["bytes"] for r in rows if r["inter_node"] is False),
            "unknown_node_bytes": sum(r["bytes"] for r in rows if r["inter_node"] is None),
            "senders_across_nodes": sorted({r["sender"] for r in rows if r["inter_node"]}),
            "without_ranges": sorted(k for k, _, net in results if k is not None and not (net or {}).get("has_ranges")),
            "slowest": None if slowest is None else {k: slowest[k] for k in (
                "sender", "receiver", "sender_host", "receiver_host", "bytes", "in_flight_ns", "bandwidth_bps")}}
