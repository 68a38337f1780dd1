"""COMM003: collective bandwidth, per collective kind and message size, against the link's peak."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypedDict, TypeVar

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, load_sql, pct, report_span_ns
from analysis.diagnosis.rules.nsys.links import collective_peak
from analysis.model.trace import Trace
from analysis.results import CollectiveExtra

# NCCL's bus-bandwidth factors (nccl-tests, doc/PERFORMANCE.md): busBw = algBw * factor(n).
BUS_FACTOR_SQL = """CASE op WHEN 'AllReduce' THEN 2.0 * (n - 1) / n
                            WHEN 'AllGather' THEN (n - 1)::DOUBLE / n
                            WHEN 'ReduceScatter' THEN (n - 1)::DOUBLE / n
                            WHEN 'AllToAll' THEN (n - 1)::DOUBLE / n
                            ELSE 1.0 END"""
# NCCL's payload records one rank's share for AllGather (send bytes) and ReduceScatter (receive bytes);
# nccl-tests' size, from which algBw is computed, is the whole buffer: n times that.
SIZE_SCALE_SQL = "CASE WHEN op IN ('AllGather', 'ReduceScatter') THEN n ELSE 1 END"

HOW_TO_COLLECT = ("profile NCCL >= 2.17 with nsys --trace=cuda,nvtx "
                  "(NCCL's NVTX ranges carry the size in an extended payload) and export with the payloads "
                  "(nsys export --include-blobs=true or --include-json=true; an export made without them says "
                  "EXPORT_PARAM_INCLUDE_BLOBS=false in META_DATA_EXPORT)")
# The collective, algorithm and protocol an NCCL kernel's name carries (ncclKernel_AllReduce_RING_LL_Sum_float,
# ncclDevKernel_AllGather_RING_LL(...)); the same expressions as collectives.sql's.
OP_SQL = r"COALESCE(regexp_extract(COALESCE(short_name, name), '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1), '')"
ALGO_SQL = (r"COALESCE(regexp_extract(COALESCE(short_name, name), "
            r"'_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)(?:_|\(|$)', 1), '')")
PROTO_SQL = r"COALESCE(regexp_extract(COALESCE(short_name, name), '_(LL128|LL|SIMPLE)(?:_|\(|$)', 1), '')"
NCCL_KERNELS_SQL = f"""
    SELECT pid, device, stream, start_ns, end_ns, name, end_ns - start_ns AS d,
           {OP_SQL} AS op, {ALGO_SQL} AS algo, {PROTO_SQL} AS proto
    FROM kernels WHERE category = 'nccl' AND start_ns IS NOT NULL AND end_ns > start_ns"""  # noqa: S608 - constants
# Per collective, algorithm and protocol (whole = true) and per (process, device) of each: count, time,
# median, p90 and longest kernel of ``k`` (columns op, algo, proto, pid, device, d).
GROUP_STATS_SQL = """
    SELECT op, algo, proto, GROUPING(pid, device) > 0 AS whole, pid, device, COUNT(*), SUM(d)::BIGINT AS t,
           quantile_disc(d, 0.5), quantile_disc(d, 0.9), max(d)
    FROM k GROUP BY GROUPING SETS ((op, algo, proto), (op, algo, proto, pid, device))
    ORDER BY op, algo, proto, whole DESC, t DESC, pid, device"""


# Each group lists at most this many per-rank entries (a finding per rank, each listing every rank, grows as
# ranks squared): the report's own, then the extremes of the others by the compared figure.
RANKS_LISTED = 16


_Entry = TypeVar("_Entry", bound=Mapping[str, Any])


class RankList(TypedDict, Generic[_Entry]):
    """A collective group's per-rank entries as listed (``bounded_ranks``) and how many there are in all."""

    ranks: list[_Entry]
    ranks_total: int


class SendPeer(TypedDict):
    """One rank this rank sent to over the network (``network_sends``): transfers, bytes, bandwidth, time, channels."""

    receiver_rank: int | None
    transfers: int
    bytes: int
    bandwidth_bps: float | None
    in_flight_ns: int
    channels: int


class NetworkSends(TypedDict):
    """This rank's sends over the network in the window (``network_sends``), against its GPU's inter-node peak."""

    text: str
    bytes_sent: int
    completed_bytes: int
    in_flight_ns: int
    bandwidth_bps: float | None
    peak_gbps: float | None
    peak_source: str
    efficiency_pct: float | None
    peers: list[SendPeer]


def bounded_ranks(entries: list[_Entry], own: str, key: str) -> RankList[_Entry]:
    """``{"ranks": [...], "ranks_total": n}``: ``entries`` (dicts with ``report`` and ``key``) sorted by ``key``
    descending, all of them when few, else the report ``own``'s and the highest and lowest of the rest up to
    ``RANKS_LISTED``; ``ranks_total`` counts every entry."""
    ordered = sorted(entries, key=lambda e: -e[key])
    if len(ordered) <= RANKS_LISTED:
        return {"ranks": ordered, "ranks_total": len(ordered)}
    mine = [e for e in ordered if e["report"] == own][:RANKS_LISTED]
    rest = [e for e in ordered if e["report"] != own]
    room = RANKS_LISTED - len(mine)
    high, low = (room + 1) // 2, room // 2
    kept = mine + rest[:high] + (rest[len(rest) - low:] if low else [])
    return {"ranks": sorted(kept, key=lambda e: -e[key]), "ranks_total": len(ordered)}


def group_stats(numbers: list) -> dict[str, int]:
    count, time_ns, med, p90, top = numbers
    return {"count": int(count), "time_ns": int(time_ns), "median_ns": int(med), "p90_ns": int(p90),
            "max_ns": int(top)}


def _size_class(log2: int) -> str:
    def fmt(b: int) -> str:
        for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if b >= scale:
                return f"{b // scale} {unit}"
        return f"{b} B"
    return f"{fmt(2**log2)}-{fmt(2**(log2 + 1))}"


def _ranks(trace: Trace, nccl_traces: list[Trace]) -> tuple[int, str]:
    """The communicator size: NCCL's own payload, else the job's world size, else the participants seen."""
    # From the whole report, not the analysis window: communicators are created at start-up.
    db = str(trace.scalar("SELECT current_database()")).replace('"', '""')
    n = trace.scalar(f'SELECT max(nranks) FROM "{db}".main.nccl_calls WHERE nranks > 0')  # noqa: S608 - own name
    if n:
        return int(n), "NCCL's communicator-init payload"
    world = trace.meta.get("world_size")
    if world and world.isdigit() and int(world) > 0:
        return int(world), "the job's world size"
    seen = sum(int(t.scalar("SELECT COUNT(DISTINCT pid) FROM kernels WHERE category = 'nccl'") or 0)
               for t in nccl_traces)
    return max(seen, 1), "the processes with NCCL kernels in this run"


def _gpus(trace: Trace) -> int:
    """How many GPUs the report's host shows (at least 1)."""
    n = (trace.scalar("SELECT COUNT(DISTINCT COALESCE(uuid, gpu_id::VARCHAR, device::VARCHAR)) FROM devices")
         if "devices" in trace.tables else None)
    return max(int(n or 0), 1)


class CollectiveBandwidth(Rule):
    """Slow collectives: NCCL operations whose bus bandwidth is far below the link they cross.

    *Why it matters*: a collective's time is its bytes over the bandwidth NCCL reaches. Well-sized
    collectives on a healthy fabric reach a large part of the link's peak; far less means a
    misconfigured or degraded link (NCCL fell back to sockets or PCIe, a NIC is missing, GPUDirect RDMA
    is off), the wrong algorithm or protocol for the size, or contention.

    *How it is detected*: message sizes come from NCCL's NVTX ranges (``ncclAllReduce``, ``ncclSend``
    ...) and their extended payload's ``Message size [bytes]`` (ingested into ``nccl_calls``); each call
    belongs to the first NCCL kernel its thread launched at or after the call began (a group launches
    one kernel at ``ncclGroupEnd`` for all its calls). Per kernel, with NCCL's own definitions (as in
    nccl-tests): algBw = size / kernel time, where size is the whole buffer (the payload times n for
    AllGather and ReduceScatter), and busBw = algBw x 2(n-1)/n for AllReduce, x (n-1)/n for AllGather,
    ReduceScatter and AllToAll, x 1 for Broadcast, Reduce and Send/Recv; n is the communicator size
    (the ``No. of ranks`` of the kernel's own communicator when the payloads carry the ``NCCL communicator
    ID``, NCCL >= 2.2x; else the largest of NCCL's communicator-init payloads, else the job's world size,
    else the ranks seen in the run). Groups are kept apart by n, so tensor- and data-parallel
    communicators of different sizes are never mixed.
    Kernels are grouped by collective, algorithm and protocol (from the kernel name, e.g. ``RING_LL``)
    and size class (powers of two). A group of messages of at least ``min_bytes`` whose bus bandwidth
    (bus bytes over summed time) is below ``min_efficiency_pct`` of the link peak is reported; smaller
    messages are latency-bound and are only listed. The peak is ``link_peak_gbps`` when given, else a
    stated typical figure (NVLink of the GPU's generation inside a node, one InfiniBand NIC per GPU
    across nodes, PCIe for boards without NVLink; see ``analysis.diagnosis.rules.nsys.links``). Impact: the
    time the reported groups would save at ``min_efficiency_pct`` of the peak (their time minus bus
    bytes / (peak x min_efficiency_pct)). This is NCCL kernel time, part of which COMM001 and COMM004
    may count as exposed; COMM003 says why it is long, they say whether it is hidden.

    Without message sizes (no NCCL payloads in the export) no bandwidth can be computed. The rule then
    lists the collectives by kernel instead: NCCL kernel time, count, median, p90 and longest duration per
    collective, algorithm, protocol and device, each group's time on every rank of the run, and the
    slowest instances as evidence. Per group at most 16 ranks are listed (the report's own and the highest
    and lowest of the others; ``ranks_total`` counts them all), in both cases. That finding is informational (impact 0): kernel time alone cannot
    tell a slow link from a small message or from waiting for a late rank (COMM002).
    """

    id = "COMM003"
    extra_type = CollectiveExtra
    name = "comm.collective-bandwidth"
    verdict_kind = "communication"
    next_step = "check the slow links and NCCL's algorithm for the slow size class"
    run_split = "ranks"  # every rank's share of its groups, from the other reports (multi-rank runs)
    scope = "cross_report"
    category = "communication"
    requires = ("kernels",)
    thresholds = {
        "min_efficiency_pct": Threshold(50.0, "%", "report a size class whose bus bandwidth is below this "
                                                   "share of the link's peak", minimum=0.0, maximum=100.0),
        "min_bytes": Threshold(float(2**20), "B", "smallest message counted as bandwidth-bound; smaller "
                                                  "ones are latency-bound and only listed",
                               minimum=0.0, maximum=1e15),
        "link_peak_gbps": Threshold(0.0, "GB/s", "the link's peak per direction; 0 = the typical peak of "
                                                 "the GPU's generation (NVLink / InfiniBand / PCIe)",
                                    minimum=0.001, maximum=1e5, special=(0.0,)),
    }
    summary = "Collective algorithm and bus bandwidth per kind and size, against the link peak"
    advice = (
        "Check the transport NCCL chose (NCCL_DEBUG=INFO: NET/IB vs socket, GPUDirect RDMA, NVLink/P2P), compare "
        "with nccl-tests at the same sizes, check links (nvidia-smi nvlink -s, ibstat), and fuse small collectives "
        "into larger buckets.")

    def check(self, ctx: RuleContext) -> list[Finding]:
        run, params = ctx.run, ctx.params
        traces = [t for t in self.applicable(run)
                  if t.scalar("SELECT 1 FROM kernels WHERE category = 'nccl' LIMIT 1") is not None]
        if not traces:
            return []
        sized = [t for t in traces if t.has_rows("nccl_calls")  # a version-2 file has no such table
                 and t.scalar("SELECT 1 FROM nccl_calls WHERE bytes IS NOT NULL LIMIT 1")]
        if not sized:
            # No sizes anywhere: no bandwidth, but the collectives by kernel, each rank's own (compared across
            # ranks in the run step, ``run_facts.comm003_across``).
            return [f for t in traces if (f := self._by_kernel(t)) is not None]
        hosts = {t.meta.get("host") for t in traces if t.meta.get("host")}
        # Several hosts in the run, or (a report analyzed on its own) a communicator larger than the GPUs
        # its host shows: the collectives cross nodes.
        inter_node = len(hosts) > 1 or any(_ranks(t, traces)[0] > _gpus(t) for t in sized)
        per = {}
        for t in sized:
            per[t.label] = self._groups(t, traces, inter_node, params)
        # Cross-rank comparison: the same (op, algorithm, protocol, size class) on every report.
        across: dict[tuple, list[dict]] = {}
        for t in sized:
            for g in per[t.label][0]:
                across.setdefault(g["key"], []).append({"report": t.label, "rank": t.rank, "device": g["device"],
                                                        "bus_gbps": g["bus_gbps"]})
        out = []
        for t in sized:
            f = self._finding(t, *per[t.label], across, params)
            if f is not None:
                out.append(f)
        return out

    def _groups(self, trace: Trace, traces: list[Trace], inter_node: bool,
                params: Mapping[str, float]) -> tuple[list[dict], dict]:
        n, n_source = _ranks(trace, traces)
        given = params["link_peak_gbps"]
        try:
            for stmt in load_sql("collectives.sql").split(";\n"):
                if stmt.strip():
                    trace.con.execute(stmt)
            # Each kernel's n: its communicator's size when the payloads name the communicator, else the default.
            db = str(trace.scalar("SELECT current_database()")).replace('"', '""')
            trace.con.execute(f"""
                CREATE OR REPLACE TEMP TABLE _gp_coll_n AS
                SELECT c.*, COALESCE(cm.n, {int(n)}) AS n, cm.n IS NOT NULL AS n_from_comm FROM _gp_coll c
                LEFT JOIN (SELECT comm_id, max(nranks) AS n FROM "{db}".main.nccl_calls
                           WHERE nranks > 0 AND comm_id IS NOT NULL GROUP BY comm_id) cm
                  ON cm.comm_id = c.comm_id""")  # noqa: S608 - integers and own names
            rows = trace.sql(f"""
                WITH g AS (SELECT * FROM _gp_coll_n WHERE bytes > 0)
                SELECT op, algo, proto, floor(log2(bytes))::INTEGER AS cls, device, n, bool_and(n_from_comm),
                       COUNT(*), SUM(bytes::HUGEINT * {SIZE_SCALE_SQL}) AS size_b,
                       SUM(bytes::DOUBLE * {SIZE_SCALE_SQL} * {BUS_FACTOR_SQL}) AS bus_b,
                       SUM(end_ns - start_ns)::BIGINT AS time_ns, MIN(bytes) AS min_b
                FROM g GROUP BY ALL ORDER BY time_ns DESC, op, cls""")  # noqa: S608 - integers and constants
            unsized = trace.scalar("SELECT COUNT(*) FROM _gp_coll WHERE bytes IS NULL OR bytes = 0")
            slow = trace.sql(f"""
                WITH g AS (SELECT * FROM _gp_coll_n WHERE bytes >= $min_b)
                SELECT pid, device, stream, start_ns, end_ns, name, op, algo, proto, bytes,
                       bytes::DOUBLE * {SIZE_SCALE_SQL} * {BUS_FACTOR_SQL} / (end_ns - start_ns) AS bus_gbps,
                       bytes::DOUBLE * {SIZE_SCALE_SQL} / (end_ns - start_ns) AS alg_gbps
                FROM g ORDER BY bus_gbps, start_ns LIMIT 20""",  # noqa: S608 - integers and constants
                              {"min_b": int(params["min_bytes"])})
        finally:
            trace.con.execute("DROP TABLE IF EXISTS _gp_coll; DROP TABLE IF EXISTS _gp_coll_n")
        devices = {}
        for dev in {r[4] for r in rows}:
            d = trace.sql("""SELECT name, cc_major, cc_minor FROM devices WHERE device IS NOT DISTINCT FROM $d
                             ORDER BY pid NULLS LAST LIMIT 1""", {"d": dev})
            name, major, minor = d[0] if d else (None, None, None)
            devices[dev] = (float(given), "given (link_peak_gbps)") if given > 0 else \
                collective_peak(name, major, minor, inter_node)
        groups = []
        for op, algo, proto, cls, dev, n_ranks, from_comm, count, size_b, bus_b, time_ns, min_b in rows:
            peak, source = devices[dev]
            bus = float(bus_b) / time_ns
            groups.append({
                "key": (op, algo, proto, int(cls), int(n_ranks)), "op": op, "algorithm": algo or None,
                "protocol": proto or None, "size_class": _size_class(int(cls)), "device": dev,
                "ranks_n": int(n_ranks), "ranks_n_source": "the communicator's init payload" if from_comm else n_source,
                "count": int(count), "bytes": int(size_b),
                "time_ns": int(time_ns), "alg_gbps": round(float(size_b) / time_ns, 6), "bus_gbps": round(bus, 6),
                "bus_bytes": float(bus_b), "peak_gbps": peak, "peak_source": source,
                "efficiency_pct": None if not peak else round(100.0 * bus / peak, 3),
                "bound": "bandwidth" if int(min_b) >= params["min_bytes"] else "latency"})
        return groups, {"n": n, "n_source": n_source, "slow": slow, "unsized": int(unsized or 0),
                        "inter_node": inter_node}

    def _finding(self, trace: Trace, groups: list[dict], info: dict, across: dict,
                 params: Mapping[str, float]) -> Finding | None:
        eff = params["min_efficiency_pct"] / 100.0
        # A communicator of one rank moves no bus bytes (factor 0): nothing to compare with a link.
        bad = [g for g in groups if g["bound"] == "bandwidth" and g["peak_gbps"] and g["bus_bytes"] > 0
               and g["bus_gbps"] < eff * g["peak_gbps"]]
        impact = 0
        for g in bad:
            g["excess_ns"] = int(g["time_ns"] - g["bus_bytes"] / (g["peak_gbps"] * eff))
            impact += g["excess_ns"]
        if not bad or impact <= 0:
            return None
        evidence = tuple(
            Evidence(start_ns=int(r[3]), end_ns=int(r[4]), device=r[1], stream=r[2], pid=r[0], rank=trace.rank,
                     name=r[5], value_ns=int(r[4]) - int(r[3]),
                     detail={"op": r[6], "algorithm": r[7] or None, "protocol": r[8] or None, "bytes": int(r[9]),
                             "alg_gbps": round(float(r[11]), 6), "bus_gbps": round(float(r[10]), 6)})
            for r in info["slow"])
        worst = min(bad, key=lambda g: g["bus_gbps"] / g["peak_gbps"])
        share = pct(impact, report_span_ns(trace))
        label = " ".join(x for x in (worst["op"], worst["algorithm"], worst["protocol"]) if x)
        public = [{k: v for k, v in g.items() if k not in ("key", "bus_bytes")}
                  | bounded_ranks(across.get(g["key"], []), trace.label, "bus_gbps") for g in groups]
        return Finding(
            rule_id=self.id,
            title=(f"Slow collectives: {label} {worst['size_class']} at {fmt.rate(worst['bus_gbps'] * 1e9)} bus bandwidth "
                   f"({fmt.pct(worst['efficiency_pct'])} of {fmt.rate(worst['peak_gbps'] * 1e9)})"),
            message=(f"{fmt.count(sum(g['count'] for g in bad))} collective(s) of at least {fmt.exact(params['min_bytes'] / 2**20)} MiB in "
                     f"{fmt.count(len(bad))} size class(es) ran below {fmt.exact(params['min_efficiency_pct'])}% of the link's peak "
                     f"(n = {fmt.count(info['n'])} ranks, from {info['n_source']}); at that share they would take "
                     f"{fmt_ms(impact)} less" + (f" ({fmt.pct(share)} of the GPU-active span)." if share is not None else ".")
                     + f" Peak: {worst['peak_source']}."),
            impact_ns=impact, impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=sum(g["count"] for g in bad), report=trace.label, rank=trace.rank,
            extra=CollectiveExtra(groups=list(public), ranks_n=info["n"], ranks_source=info["n_source"],
                                             inter_node=info["inter_node"], kernels_without_size=info["unsized"]),
        )

    def _by_kernel(self, trace: Trace) -> Finding | None:
        """Without message sizes: NCCL kernel time per collective, algorithm and protocol, with each
        (process, device)'s share and the slowest instances. No bandwidth can be computed, so the finding
        costs nothing (impact 0, info)."""
        rows = trace.sql(f"WITH k AS ({NCCL_KERNELS_SQL}) {GROUP_STATS_SQL}")
        if not rows:
            return None
        slow = trace.sql(f"""WITH k AS ({NCCL_KERNELS_SQL})
                             SELECT pid, device, stream, start_ns, end_ns, name, op, algo, proto, d
                             FROM k ORDER BY d DESC, start_ns LIMIT 20""")  # noqa: S608 - constants
        groups: list[dict] = []
        for op, algo, proto, whole, pid, dev, *numbers in rows:
            stats = group_stats(numbers)
            if whole:
                groups.append({"op": op or None, "algorithm": algo or None, "protocol": proto or None, **stats,
                               "ranks": []})
            else:  # one (process, device) of the group; in a multi-rank run every rank's (``comm003_across``)
                groups[-1]["ranks"].append({"report": trace.label, "rank": trace.rank, "pid": pid, "device": dev,
                                            **stats})
        for g in groups:
            g.update(bounded_ranks(g["ranks"], trace.label, "time_ns"))
        total = sum(g["time_ns"] for g in groups)
        for g in groups:
            g["share_pct"] = round(100.0 * g["time_ns"] / total, 3)
        groups.sort(key=lambda g: (-g["time_ns"], g["op"] or "", g["algorithm"] or "", g["protocol"] or ""))
        top = groups[0]
        label = " ".join(x for x in (top["op"], top["algorithm"], top["protocol"]) if x) or "unnamed NCCL kernels"
        evidence = tuple(
            Evidence(start_ns=int(r[3]), end_ns=int(r[4]), device=r[1], stream=r[2], pid=r[0], rank=trace.rank,
                     name=r[5], value_ns=int(r[9]),
                     detail={k: v for k, v in (("op", r[6]), ("algorithm", r[7]), ("protocol", r[8])) if v})
            for r in slow)
        count = sum(g["count"] for g in groups)
        net = network_sends(trace)
        return Finding(
            rule_id=self.id,
            title=(f"Collectives by kernel ({'network sizes only' if net else 'no message sizes, so no bandwidth'}): "
                   f"{label}, {fmt.count(top['count'])} kernel(s), "
                   f"{fmt_ms(top['time_ns'])}"
                   + (f" ({fmt.pct(top['share_pct'])} of {fmt_ms(total)} of NCCL kernel time)" if len(groups) > 1 else "")
                   + (f"; network sends {net['text']}" if net else "")),
            message=(f"{fmt.count(count)} NCCL kernel(s) in {fmt.count(len(groups))} group(s) of collective, algorithm and protocol, each "
                     f"with its time on every rank and GPU; the slowest instances are the evidence. NCCL kernel "
                     f"time includes waiting for the other ranks (COMM002) and may be hidden behind compute "
                     f"(COMM001). Without message sizes the bandwidth cannot be compared with the link, so this "
                     f"costs nothing in the ranking."
                     + (f" NCCL's network ranges give the sizes of what this rank sent over the network: "
                        f"{net['text']}, against {net['peak_source']}." if net else "")),
            impact_ns=0, impact_pct=None, severity="info",
            advice="To measure bus bandwidth against the link peak, " + HOW_TO_COLLECT + ".",
            evidence=evidence, evidence_total=count, report=trace.label, rank=trace.rank,
            extra=CollectiveExtra(
                sizes="by kernel", groups=list(groups), nccl_time_ns=total,
                network={k: v for k, v in net.items() if k != "text"} if net else None),
        )


def network_sends(trace: Trace) -> NetworkSends | None:
    """This rank's sends over the network in the window (NCCL's ``ncclNet*`` ranges, ``analysis.model.network``)
    with their achieved bandwidth against the typical inter-node peak of its GPU; None when the report
    records none. The bandwidth is the bytes over the time at least one send was in flight."""
    from analysis.model.network import report_network

    net = report_network(trace, trace.window)
    sends = [p for p in net["peers"] if p["direction"] == "send"]
    if not sends:
        return None
    side = net["directions"]["send"]
    nbytes, flight, bps = side["completed_bytes"], side["in_flight_ns"], side["bandwidth_bps"]
    d = trace.sql("SELECT name, cc_major, cc_minor FROM devices ORDER BY device NULLS LAST, pid NULLS LAST LIMIT 1")
    name, major, minor = d[0] if d else (None, None, None)
    peak, source = collective_peak(name, major, minor, True)
    eff = None if bps is None or not peak else round(100.0 * bps / (peak * 1e9), 3)
    text = (f"{fmt.size(sum(p['bytes'] for p in sends))} in {fmt.count(sum(p['transfers'] for p in sends))} send(s) to rank(s) "
            f"{', '.join(str(p['receiver_rank']) for p in sends)}"
            + (f" at {fmt.rate(bps)} achieved" if bps is not None else "")
            + (f" ({fmt.pct(eff)} of {fmt.rate(peak * 1e9)})" if eff is not None and peak else ""))
    return {"text": text, "bytes_sent": sum(p["bytes"] for p in sends), "completed_bytes": nbytes,
            "in_flight_ns": flight, "bandwidth_bps": bps, "peak_gbps": peak, "peak_source": source,
            "efficiency_pct": eff, "peers": [SendPeer(receiver_rank=p["receiver_rank"], transfers=p["transfers"],
                                                      bytes=p["bytes"], bandwidth_bps=p["bandwidth_bps"],
                                                      in_flight_ns=p["in_flight_ns"], channels=p["channels"])
                                             for p in sends]}
