"""An ingested NCCL log as frozen data (``NcclLog``, read back by ``store.load``) and its network path as JSON."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NotRequired, TypedDict, overload

from analysis.readers.nccl.schema import StoredNetNote
from analysis.report_types import (
    AlgoCallJson,
    BusBandwidth,
    ConnectionJson,
    EnvJson,
    FailureJson,
    GdrJson,
    GraphJson,
    NetworkPath,
    NicFields,
    NicGdrJson,
    PairJson,
    PathNodeLink,
    RankJson,
    RingJson,
    SourceJson,
    TestsInfo,
    TestsRowJson,
    TopologyLinks,
    TreeJson,
    TuningJson,
    WarnFields,
)

_FIELDS: dict[type, tuple[str, ...]] = {}


# A record's JSON: its fields, typed by the record's ``*Json`` (``*Fields``) type of ``analysis.report_types``.
@overload
def asdict(item: Rank) -> RankJson: ...
@overload
def asdict(item: Nic) -> NicFields: ...
@overload
def asdict(item: Gdr) -> GdrJson: ...
@overload
def asdict(item: Connection) -> ConnectionJson: ...
@overload
def asdict(item: Ring) -> RingJson: ...
@overload
def asdict(item: Tree) -> TreeJson: ...
@overload
def asdict(item: EnvVar) -> EnvJson: ...
@overload
def asdict(item: Warn) -> WarnFields: ...
@overload
def asdict(item: Failure) -> FailureJson: ...
@overload
def asdict(item: AlgoCall) -> AlgoCallJson: ...
@overload
def asdict(item: Tuning) -> TuningJson: ...
@overload
def asdict(item: Graph) -> GraphJson: ...
@overload
def asdict(item: TestsRow) -> TestsRowJson: ...
@overload
def asdict(item: Source) -> SourceJson: ...
@overload
def asdict(item: Pair) -> PairJson: ...
def asdict(item: Any) -> Any:
    """A flat record (every field a number, string, None or a tuple of them) as its JSON: what
    ``dataclasses.asdict`` gives for it, without its recursive deep copy (the fields are immutable), which cost
    seconds on a 1,024-rank job's path."""
    names = _FIELDS.get(type(item))
    if names is None:
        names = _FIELDS[type(item)] = tuple(f.name for f in fields(item))
    return {name: getattr(item, name) for name in names}


@dataclass(frozen=True)
class Rank:
    rank: int
    host: str | None
    pid: int | None
    cuda_dev: int | None
    bus_id: str | None
    gpu: str | None
    label: int | None
    nranks: int | None
    comm_id: str | None


@dataclass(frozen=True)
class Nic:
    host: str | None
    net: str | None      # None: a plugin's device a connection names without its net
    index: int
    name: str
    port: int | None
    link: str | None
    kind: str            # IB | RoCE | EFA | CXI | socket | other
    speed_mbps: int | None
    virtual: bool
    line: int | None


@dataclass(frozen=True)
class Gdr:
    host: str | None
    scope: str           # 'gpu' (decides) or 'hca'
    gpu: str | None
    hca: int | None
    hca_name: str | None
    enabled: bool
    distance: int | None
    level: int | None
    op: str | None
    reason: str | None
    line: int | None
    text: str | None = None


@dataclass(frozen=True)
class Connection:
    channel: int
    conn: int | None
    src: int
    dst: int
    direction: str | None   # 'send' | 'recv' | None (intra-node lines name no side)
    host: str | None        # the host that printed it
    transport: str
    kind: str               # P2P | SHM | NET | COLLNET ...
    net: str | None
    nic: int | None
    proxy_rank: int | None  # PXN: the rank whose NIC carries it
    gdr: bool
    shared: bool
    mode: str | None
    read: bool
    line: int
    text: str | None = None


@dataclass(frozen=True)
class Ring:
    channel: int
    ranks: tuple[int, ...]
    line: int


@dataclass(frozen=True)
class Tree:
    channel: int
    rank: int
    up: int | None
    down: tuple[int, ...]
    line: int


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None
    set_by: str             # 'environment' | 'net plugin'
    count: int
    distinct_values: int
    line: int | None


@dataclass(frozen=True)
class Warn:
    line: int
    kind: str
    message: str
    host: str | None
    pid: int | None
    dev: int | None
    label: int | None
    source: str | None
    rank: int | None


@dataclass(frozen=True)
class Failure:
    line: int
    label: int | None
    kind: str
    text: str


@dataclass(frozen=True)
class AlgoCall:
    coll: str | None
    bytes: int | None
    algo: str | None
    proto: str | None
    channels: int | None
    calls: int
    line: int


@dataclass(frozen=True)
class Tuning:
    coll: str
    algo: str | None
    proto: str
    latency_us: float | None
    bw_gbs: float | None
    line: int


@dataclass(frozen=True)
class Graph:
    pattern: int | None
    cross_nic: int | None
    nchannels: int | None
    bw_intra: float | None
    bw_inter: float | None
    type: str | None
    line: int


@dataclass(frozen=True)
class TestsRow:
    table: int
    line: int
    size: int | None
    count: int | None
    type: str | None
    redop: str | None
    root: int | None
    oop_time_us: float | None
    oop_algbw: float | None
    oop_busbw: float | None
    oop_wrong: float | None
    ip_time_us: float | None
    ip_algbw: float | None
    ip_busbw: float | None
    ip_wrong: float | None


@dataclass(frozen=True)
class Source:
    """One file of a log merged from several (one per rank, ``NCCL_DEBUG_FILE=%h.%p``): its lines are numbered
    ``offset + 1`` to ``offset + lines`` in the merged log."""

    file: str
    offset: int
    lines: int


@dataclass(frozen=True)
class Pair:
    """Every connection between two ranks (one direction), over all channels."""

    src: int
    dst: int
    inter_node: bool | None
    transports: tuple[str, ...]
    channels: tuple[int, ...]
    nics: tuple[int, ...]
    gdr: bool | None        # None: not a network pair
    proxy_ranks: tuple[int, ...]
    shared: bool
    lines: tuple[int, ...]


@dataclass
class _Derived:
    """What ``NcclLog`` derives once and keeps (its fields are immutable; these are computed on first use)."""

    rank_hosts: dict[int, str] | None = None
    pairs: list[Pair] | None = None
    source_offsets: list[int] | None = None


@dataclass
class _PairAcc:
    """One (src, dst)'s connections while ``NcclLog.pairs`` gathers them."""

    transports: set[str] = field(default_factory=set)
    kinds: set[str] = field(default_factory=set)
    channels: set[int] = field(default_factory=set)
    nics: set[int] = field(default_factory=set)
    gdr: set[bool] = field(default_factory=set)
    proxy: set[int] = field(default_factory=set)
    shared: bool = False
    lines: list[int] = field(default_factory=list)


@dataclass
class _LinkAcc:
    """One ordered host pair's rank pairs while ``NcclLog.node_links`` gathers them."""

    rank_pairs: int = 0
    transports: set[str] = field(default_factory=set)
    gdr: set[bool] = field(default_factory=set)


@dataclass(frozen=True)
class NcclLog:
    """Everything read from one NCCL debug log."""

    version: str | None
    version_raw: str | None
    ranks: tuple[Rank, ...]
    nics: tuple[Nic, ...]
    networks: Mapping[str, int]
    oob: Mapping[str, str]
    net_notes: tuple[StoredNetNote, ...]
    gdr: tuple[Gdr, ...]
    connections: tuple[Connection, ...]
    rings: tuple[Ring, ...]
    trees: tuple[Tree, ...]
    channel_counts: Mapping[str, int]
    env: tuple[EnvVar, ...]
    warnings: tuple[Warn, ...]
    warning_counts: Mapping[str, int]
    failures: tuple[Failure, ...]
    algo_calls: tuple[AlgoCall, ...]
    tuning: tuple[Tuning, ...]
    graphs: tuple[Graph, ...]
    topo_links: Mapping[str, TopologyLinks]
    p2p_refused: tuple[tuple[str | None, str, str, int], ...]
    nvls: Mapping[str, int]
    tests_rows: tuple[TestsRow, ...]
    tests: TestsInfo
    counters: Mapping[str, int]
    meta: Mapping[str, str]
    sources: tuple[Source, ...] = ()   # several files merged: where each line number is (empty: one file)
    _cache: _Derived = field(default_factory=_Derived, compare=False, repr=False)

    # ------------------------------------------------------------------ derived facts
    def rank_hosts(self) -> dict[int, str]:
        """rank -> host, from the init lines, nccl-tests' device list, then who printed each connection."""
        if self._cache.rank_hosts is not None:
            return self._cache.rank_hosts
        out: dict[int, str] = {r.rank: r.host for r in self.ranks if r.host}
        for c in self.connections:
            if c.host is None:
                continue
            printer = c.dst if c.direction == "recv" else c.src
            out.setdefault(printer, c.host)
            if c.kind != "NET" and c.direction is None:
                out.setdefault(c.dst, c.host)
        self._cache.rank_hosts = out
        return out

    def nodes(self) -> list[str]:
        """The hosts of the ranks; without any rank facts, the hosts the log's line prefixes name."""
        hosts = set(self.rank_hosts().values())
        if not hosts:
            hosts = {h for h in self.meta.get("hosts_seen", "").split(" ") if h}
        return sorted(hosts)

    def is_inter_node(self, src: int, dst: int, kind: str | None = None) -> bool | None:
        hosts = self.rank_hosts()
        a, b = hosts.get(src), hosts.get(dst)
        if a is not None and b is not None:
            return a != b
        if kind == "NET":
            return True
        if kind in ("P2P", "SHM"):
            return False
        return None

    def pairs(self) -> list[Pair]:
        if self._cache.pairs is not None:
            return self._cache.pairs
        acc: dict[tuple[int, int], _PairAcc] = {}
        for c in self.connections:
            a = acc.get((c.src, c.dst))
            if a is None:
                a = acc[(c.src, c.dst)] = _PairAcc()
            a.transports.add(c.transport)
            a.kinds.add(c.kind)
            a.channels.add(c.channel)
            if c.nic is not None:
                a.nics.add(c.nic)
            if c.kind == "NET" and c.net != "Socket":  # GPUDirect means nothing for sockets
                a.gdr.add(c.gdr)
            if c.proxy_rank is not None:
                a.proxy.add(c.proxy_rank)
            a.shared = a.shared or c.shared
            if len(a.lines) < 8:
                a.lines.append(c.line)
        out = []
        for (src, dst), a in sorted(acc.items(), key=lambda kv: kv[0]):
            kind = "NET" if "NET" in a.kinds else next(iter(sorted(a.kinds)), None)
            out.append(Pair(src, dst, self.is_inter_node(src, dst, kind), tuple(sorted(a.transports)),
                            tuple(sorted(a.channels)), tuple(sorted(a.nics)),
                            (all(a.gdr) if a.gdr else None), tuple(sorted(a.proxy)), a.shared,
                            tuple(a.lines)))
        self._cache.pairs = out
        return out

    def providers(self) -> dict[str, int | None]:
        """Net plugin providers (aws-ofi-nccl: efa, cxi ...) and how many NICs each found."""
        return {str(n["what"]): n.get("count") for n in self.net_notes if n.get("kind") == "provider"}

    def nic_name(self, host: str | None, index: int) -> str:
        """``NET/IB/6 = mlx5_3 (RoCE)``: a NIC index as the log names it on that host."""
        for n in self.nics:
            if n.index == index and (n.host == host or host is None):
                return f"NET/{n.net}/{index} = {n.name} ({n.kind})"
        nets = [c.net for c in self.connections if c.kind == "NET" and c.nic == index and c.net]
        return f"NET/{nets[0]}/{index}" if nets else f"net device {index}"

    def nic_of_warning(self, w: Warn) -> str | None:
        """The NIC a WARN is about: the device it names (``for device N``), else the one NIC its rank's own
        side of the network connections used (all of them, comma-separated, when several)."""
        device = None
        at = w.message.find("for device ")
        if at >= 0:
            digits = ""
            for ch in w.message[at + 11:at + 20]:
                if ch not in "0123456789":
                    break
                digits += ch
            device = int(digits) if digits else None
        if device is None and w.rank is not None:
            own = sorted({c.nic for c in self.connections if c.kind == "NET" and c.nic is not None and (
                (c.direction == "send" and c.src == w.rank) or (c.direction == "recv" and c.dst == w.rank))})
            if len(own) > 1:
                return ", ".join(self.nic_name(w.host, d) for d in own)
            device = own[0] if own else None
        return self.nic_name(w.host, device) if device is not None else None

    def rails(self) -> dict[str, dict[int, list[int]]]:
        """host -> rank -> the NIC indices that rank's own side of its inter-node connections used (PXN: the
        proxy's NIC counts for the proxy): the colours of a rail view."""
        hosts = self.rank_hosts()
        out: dict[str, dict[int, set[int]]] = {}
        for c in self.connections:
            if c.kind != "NET" or c.nic is None or c.direction is None:
                continue
            me = c.src if c.direction == "send" else c.dst
            if c.proxy_rank is not None:
                me = c.proxy_rank
            host = hosts.get(me) or c.host
            if host is not None:
                out.setdefault(host, {}).setdefault(me, set()).add(c.nic)
        return {h: {r: sorted(n) for r, n in sorted(ranks.items())} for h, ranks in sorted(out.items())}

    def node_links(self) -> list[PathNodeLink]:
        """Per ordered pair of hosts (the same host twice: inside a node): rank pairs, transports, channels."""
        hosts = self.rank_hosts()
        acc: dict[tuple[str, str], _LinkAcc] = {}
        for p in self.pairs():
            a, b = hosts.get(p.src), hosts.get(p.dst)
            if a is None or b is None:
                continue
            row = acc.get((a, b))
            if row is None:
                row = acc[(a, b)] = _LinkAcc()
            row.rank_pairs += 1
            row.transports.update(p.transports)
            if p.gdr is not None:
                row.gdr.add(p.gdr)
        return [{"src_host": a, "dst_host": b, "rank_pairs": r.rank_pairs, "transports": sorted(r.transports),
                 "gdr": (all(r.gdr) if r.gdr else None)} for (a, b), r in sorted(acc.items(), key=lambda kv: kv[0])]

    def env_value(self, name: str) -> str | None:
        for e in self.env:
            if e.name == name:
                return e.value
        return None

    def nchannels(self) -> int | None:
        """Channels the communicator runs: NCCL's own count when printed, else the highest channel seen + 1."""
        for key in ("coll", "declared"):
            if self.channel_counts.get(key):
                return int(self.channel_counts[key])
        seen = [r.channel for r in self.rings] + [c.channel for c in self.connections]
        return max(seen) + 1 if seen else None

    def busbw(self) -> BusBandwidth:
        """nccl-tests' peak and average bus bandwidth (GB/s) and where the peak was."""
        oop = [(r.oop_busbw, r) for r in self.tests_rows if r.oop_busbw is not None]
        ip = [(r.ip_busbw, r) for r in self.tests_rows if r.ip_busbw is not None]
        out: BusBandwidth = {"peak_busbw": None, "peak_busbw_in_place": None, "peak_size": None,
                             "peak_line": None, "avg_busbw": self.tests.get("avg_busbw")}
        if oop:
            best = max(oop, key=lambda t: t[0])
            out["peak_busbw"], out["peak_size"], out["peak_line"] = best[0], best[1].size, best[1].line
        if ip:
            out["peak_busbw_in_place"] = max(v for v, _ in ip)
        return out

    def rank_of(self, host: str | None, pid: int | None, dev: int | None, label: int | None) -> int | None:
        """The rank that printed a line: the launcher's label, else the init lines of the same host/pid/device."""
        if label is not None:
            return label
        candidates = [r for r in self.ranks if r.host == host and r.pid == pid]
        if len(candidates) > 1 and dev is not None:
            candidates = [r for r in candidates if r.cuda_dev == dev]
        return candidates[0].rank if len(candidates) == 1 else None

    @overload
    def where(self, line: int) -> tuple[str | None, int]: ...
    @overload
    def where(self, line: int | None) -> tuple[str | None, int | None]: ...
    def where(self, line: int | None) -> tuple[str | None, int | None]:
        """A line number of this log as (file, line in that file); the file is None for a log of one file."""
        if line is None or not self.sources:
            return None, line
        offsets = self._cache.source_offsets
        if offsets is None:
            offsets = self._cache.source_offsets = [s.offset for s in self.sources]
        at = bisect.bisect_left(offsets, line) - 1  # the last file whose offset is below the line
        if at < 0:
            return None, line
        return self.sources[at].file, line - self.sources[at].offset

    def line_ref(self, line: int | None) -> str:
        """``line 12`` or, in a log merged from several files, ``rank3.log line 12``."""
        file, at = self.where(line)
        return f"line {at}" if file is None else f"{file} line {at}"

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> NetworkPath:
        """The run's network path, JSON-safe (every string as found in the log: escape it where shown)."""
        hosts = self.rank_hosts()
        gdr_by_nic: dict[tuple[str | None, int | None], list[NicGdrJson]] = {}
        for g in self.gdr:  # per GPU and per HCA, the line that decided GPUDirect for this NIC
            gdr_by_nic.setdefault((g.host, g.hca), []).append(
                {"scope": g.scope, "gpu": g.gpu, "enabled": g.enabled, "distance": g.distance, "level": g.level,
                 "reason": g.reason, "line": g.line})
        out: NetworkPath = {
            "version": self.version,
            "version_raw": self.version_raw,
            "nodes": [{"host": h, "ranks": sorted(r for r, hh in hosts.items() if hh == h),
                       "oob": self.oob.get(h)} for h in self.nodes()],
            "ranks": [asdict(r) for r in self.ranks],
            "networks": dict(self.networks),
            "nics": [{**asdict(n), "gdr": gdr_by_nic.get((n.host, n.index), [])} for n in self.nics],
            "net_notes": [{**n} for n in self.net_notes],
            "providers": self.providers(),
            "gdr": [asdict(g) for g in self.gdr],
            "pairs": [asdict(p) for p in self.pairs()],
            "node_links": self.node_links(),
            "rails": {h: {str(r): n for r, n in ranks.items()} for h, ranks in self.rails().items()},
            "connections": [asdict(c) for c in self.connections[:5000]],
            "connections_total": len(self.connections),
            "nchannels": self.nchannels(),
            "channel_counts": dict(self.channel_counts),
            "rings": [asdict(r) for r in self.rings],
            "trees": [asdict(t) for t in self.trees[:5000]],
            "nvls": dict(self.nvls),
            "env": [asdict(e) for e in self.env],
            "warnings": [{**asdict(w), "nic": self.nic_of_warning(w)} for w in self.warnings],
            "warning_counts": dict(self.warning_counts),
            "failures": [asdict(f) for f in self.failures],
            "algo_calls": [asdict(a) for a in self.algo_calls],
            "tuning": [asdict(t) for t in self.tuning],
            "graphs": [asdict(g) for g in self.graphs],
            "topology_links": {k: {**v} for k, v in self.topo_links.items()},
            "p2p_refused": [list(p) for p in self.p2p_refused],
            "nccl_tests": {**self.tests, **self.busbw(), "rows": [asdict(r) for r in self.tests_rows]},
            "counters": dict(self.counters),
        }
        if self.sources:
            out["sources"] = [asdict(s) for s in self.sources]
            self._in_files(out)
        return out

    def _in_files(self, out: NetworkPath) -> None:
        """A merged log's JSON with every line number as (``file``, line in that file), as its findings say it (a
        pair's first ``lines`` stay the merged log's numbers)."""
        for n in out["nics"]:
            self._maybe_in_file(n)
            for g in n["gdr"]:  # a NIC's GPUDirect lines
                self._maybe_in_file(g)
        for g in out["gdr"]:
            self._maybe_in_file(g)
        for e in out["env"]:
            self._maybe_in_file(e)
        for items in (out["net_notes"], out["connections"], out["rings"], out["trees"], out["warnings"],
                      out["failures"], out["algo_calls"], out["tuning"], out["graphs"], out["nccl_tests"]["rows"]):
            for item in items:
                self._in_file(item)
        tests = out["nccl_tests"]
        if tests["peak_line"] is not None:
            tests["peak_file"], tests["peak_line"] = self.where(tests["peak_line"])
        if tests["avg_line"] is not None:
            tests["avg_file"], tests["avg_line"] = self.where(tests["avg_line"])

    def _in_file(self, item: _Lined) -> None:
        item["file"], item["line"] = self.where(item["line"])

    def _maybe_in_file(self, item: _MaybeLined) -> None:
        if item["line"] is not None:
            item["file"], item["line"] = self.where(item["line"])


class _Lined(TypedDict):
    """A record's JSON with a line number (and, in a merged log, its file)."""

    line: int
    file: NotRequired[str | None]


class _MaybeLined(TypedDict):
    """A record's JSON whose line number may be unknown (a NIC or setting a net plugin names, a GPUDirect line)."""

    line: int | None
    file: NotRequired[str | None]
