"""An NCCL log's network path as data: the records an NCCL log is read into (``analysis.readers.nccl``: ranks,
NICs, GPUDirect lines, connections, rings, trees, settings, warnings ...), the log's path built from them
(``NetworkPath``, ``NcclLog.path``) and the run's (``RunNetworkPath``, ``analysis.run.nccl_step``: the path joined
with the run's nsys reports).

The analysis passes these dataclasses; ``to_json``/``from_json`` are for the boundaries only (a report summary
saved between the two steps, the saved analysis, ``--format json``, the API). ``to_json`` writes the keys in the
order the analysis has always written them and ``from_json(x).to_json() == x`` (the JSON text is byte-identical);
``analysis.contract`` generates the schema from the type hints below. In the path of a log merged from several
files (one per rank) every record's ``line`` counts in its ``file``; in the log itself ``file`` is None and ``line``
counts in the merged log.

Standard library only, beside the contract: the readers build these, ``analysis.results`` holds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, Self, TypedDict

from analysis.report_types import (
    InterNodeTraffic,
    JoinedReport,
    LinksJoin,
    NotJoined,
    PathLink,
    PathNodeLink,
    TopologyLinks,
)
from analysis.result_parts import JSON

# A field written only when it is not None (``analysis.contract`` reads it as not required).
_OPTIONAL: Any = {"json": {"optional": True}}
_SPECS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _optional() -> Any:
    """A field written only when set: a record's ``file`` (in a path merged from several files, the file its line is
    in; its ``line`` then counts in that file)."""
    return field(default=None, metadata=_OPTIONAL)


def _spec(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A record's tuple fields (written as lists) and optional ones (left out when None), kept per class: a
    1,024-rank job's path writes some 50,000 records."""
    spec = _SPECS.get(cls)
    if spec is None:
        fields = dataclasses.fields(cls)
        spec = _SPECS[cls] = (
            tuple(f.name for f in fields if str(f.type).startswith("tuple[")),
            tuple(f.name for f in fields if f.metadata.get("json", {}).get("optional")),
        )
    return spec


class _Record:
    """A flat record (every field a number, string, None or a tuple of them) and its JSON: its fields in order,
    tuples as lists, an optional field (``file``) only when set."""

    __slots__ = ()

    def to_json(self) -> JSON:
        lists, optional = _spec(type(self))
        out = dict(self.__dict__)  # the fields, in order (a frozen dataclass assigns them in order)
        for name in lists:
            out[name] = list(out[name])
        for name in optional:
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        fields = dict(data)
        for name in _spec(cls)[0]:
            if name in fields:
                fields[name] = tuple(fields[name])
        make: Any = cls
        return make(**fields)

    def in_file(self, file: str | None, line: int) -> Self:
        """The record with its line placed in a file (the path of a log merged from several): a copy with two
        fields changed, without ``dataclasses.replace``'s walk over every field (some 30,000 records in a
        1,024-rank job's path)."""
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__, file=file, line=line)
        return out


# -- the records of a log ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rank(_Record):
    """A rank of the job: where it ran (host, pid, CUDA device, bus id, GPU), its launcher label, its communicator."""

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
class NicGdr(_Record):
    """A line that decided GPUDirect RDMA for a NIC (per GPU or per HCA): a ``Gdr`` as its NIC lists it."""

    scope: str
    gpu: str | None
    enabled: bool
    distance: int | None
    level: int | None
    reason: str | None
    line: int | None
    file: str | None = _optional()


@dataclass(frozen=True)
class NcclNic(_Record):
    """A NIC NCCL found (or a net plugin's device a connection names), and in the network path the lines that
    decided GPUDirect RDMA for it (``gdr``: empty in the log itself, whose ``gdr`` lists them)."""

    host: str | None
    net: str | None  # None: a plugin's device a connection names without its net
    index: int
    name: str
    port: int | None
    link: str | None
    kind: str  # IB | RoCE | EFA | CXI | socket | other
    speed_mbps: int | None
    virtual: bool
    line: int | None
    gdr: tuple[NicGdr, ...] = ()
    file: str | None = _optional()

    def to_json(self) -> JSON:
        out = super().to_json()
        out["gdr"] = [g.to_json() for g in self.gdr]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return super().from_json({**data, "gdr": tuple(NicGdr.from_json(g) for g in data["gdr"])})


@dataclass(frozen=True)
class NetNote(_Record):
    """A line about the network NCCL chose: no device found, a net plugin's provider and its NIC count ..."""

    kind: str
    what: str
    host: str | None
    count: int | None
    repeats: int
    text: str
    line: int
    file: str | None = _optional()


@dataclass(frozen=True)
class Gdr(_Record):
    """A line that decided GPUDirect RDMA for a GPU and NIC (``scope`` 'gpu', which decides) or for a NIC ('hca')."""

    host: str | None
    scope: str  # 'gpu' (decides) or 'hca'
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
    file: str | None = _optional()


@dataclass(frozen=True)
class Connection(_Record):
    """A connection line: one channel's link from one rank to another, its transport, NIC, proxy and GPUDirect."""

    channel: int
    conn: int | None
    src: int
    dst: int
    direction: str | None  # 'send' | 'recv' | None (intra-node lines name no side)
    host: str | None  # the host that printed it
    transport: str
    kind: str  # P2P | SHM | NET | COLLNET ...
    net: str | None
    nic: int | None
    proxy_rank: int | None  # PXN: the rank whose NIC carries it
    gdr: bool
    shared: bool
    mode: str | None
    read: bool
    line: int
    text: str | None = None
    file: str | None = _optional()


@dataclass(frozen=True)
class Ring(_Record):
    """A channel's ring: the ranks in order."""

    channel: int
    ranks: tuple[int, ...]
    line: int
    file: str | None = _optional()


@dataclass(frozen=True)
class Tree(_Record):
    """A rank's place in a channel's tree: its parent and children."""

    channel: int
    rank: int
    up: int | None
    down: tuple[int, ...]
    line: int
    file: str | None = _optional()


@dataclass(frozen=True)
class EnvVar(_Record):
    """An NCCL setting: its value (the last), who set it, how many lines and distinct values name it."""

    name: str
    value: str | None
    set_by: str  # 'environment' | 'net plugin'
    count: int
    distinct_values: int
    line: int | None
    file: str | None = _optional()


@dataclass(frozen=True)
class Warn(_Record):
    """A WARN line: its kind, who printed it (host, pid, device, launcher label, the rank) and, in the network
    path, the NIC it is about (``NcclLog.nic_of_warning``; None in the log itself)."""

    line: int
    kind: str
    message: str
    host: str | None
    pid: int | None
    dev: int | None
    label: int | None
    source: str | None
    rank: int | None
    nic: str | None = None
    file: str | None = _optional()


@dataclass(frozen=True)
class Failure(_Record):
    """A line that says the job failed (an NCCL error, a crash, a cancelled step)."""

    line: int
    label: int | None
    kind: str
    text: str
    file: str | None = _optional()


@dataclass(frozen=True)
class AlgoCall(_Record):
    """Collective calls of one size that NCCL ran with one algorithm, protocol and channel count."""

    coll: str | None
    bytes: int | None
    algo: str | None
    proto: str | None
    channels: int | None
    calls: int
    line: int
    file: str | None = _optional()


@dataclass(frozen=True)
class Tuning(_Record):
    """A row of NCCL's tuning table: a collective's latency and bandwidth with one algorithm and protocol."""

    coll: str
    algo: str | None
    proto: str
    latency_us: float | None
    bw_gbs: float | None
    line: int
    file: str | None = _optional()


@dataclass(frozen=True)
class Graph(_Record):
    """A graph search's result: its pattern, channels and intra-/inter-node bandwidth."""

    pattern: int | None
    cross_nic: int | None
    nchannels: int | None
    bw_intra: float | None
    bw_inter: float | None
    type: str | None
    line: int
    file: str | None = _optional()


@dataclass(frozen=True)
class TestsRow(_Record):
    """A row of nccl-tests' result table: the size, type and operation, out-of-place and in-place time, algorithm
    and bus bandwidth and wrong count."""

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
    file: str | None = _optional()


@dataclass(frozen=True)
class Source(_Record):
    """One file of a log merged from several (one per rank, ``NCCL_DEBUG_FILE=%h.%p``): its lines are numbered
    ``offset + 1`` to ``offset + lines`` in the merged log."""

    file: str
    offset: int
    lines: int


@dataclass(frozen=True)
class Pair(_Record):
    """Every connection between two ranks (one direction), over all channels."""

    src: int
    dst: int
    inter_node: bool | None
    transports: tuple[str, ...]
    channels: tuple[int, ...]
    nics: tuple[int, ...]
    gdr: bool | None  # None: not a network pair
    proxy_ranks: tuple[int, ...]
    shared: bool
    lines: tuple[int, ...]  # the first lines (in a merged log: its numbering)


# -- the path ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathNode(_Record):
    """A host of the job: its ranks and the interface NCCL's bootstrap (OOB) used."""

    host: str
    ranks: tuple[int, ...]
    oob: str | None


@dataclass(frozen=True)
class NcclTests:
    """nccl-tests' name, version, layout, average busbw (and its line) and out-of-bounds count, its peak bus
    bandwidth (out-of-place and in-place, GB/s) and where the peak was, and its table's rows; in a merged log, the
    files of the peak and average lines."""

    name: str | None
    version: str | None
    layout: str | None
    avg_busbw: float | None
    avg_line: int | None
    out_of_bounds: str | None
    peak_busbw: float | None
    peak_busbw_in_place: float | None
    peak_size: int | None
    peak_line: int | None
    rows: tuple[TestsRow, ...]
    peak_file: str | None = _optional()
    avg_file: str | None = _optional()

    def to_json(self) -> JSON:
        out: JSON = {
            "name": self.name,
            "version": self.version,
            "layout": self.layout,
            "avg_busbw": self.avg_busbw,
            "avg_line": self.avg_line,
            "out_of_bounds": self.out_of_bounds,
            "peak_busbw": self.peak_busbw,
            "peak_busbw_in_place": self.peak_busbw_in_place,
            "peak_size": self.peak_size,
            "peak_line": self.peak_line,
            "rows": [r.to_json() for r in self.rows],
        }
        if self.peak_file is not None:
            out["peak_file"] = self.peak_file
        if self.avg_file is not None:
            out["avg_file"] = self.avg_file
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NcclTests:
        return cls(**{**data, "rows": tuple(TestsRow.from_json(r) for r in data["rows"])})


class PathFile(TypedDict):
    """A file of a log merged from several, and what ties it to the job's first (absent for the first)."""

    file: str
    joined_by: NotRequired[str]


class PathLeftOut(TypedDict):
    """A log of the run left out of its network path: another job's, or the same bytes as a file already in."""

    file: str
    reason: str


def _records(items: Sequence[_Record]) -> list[JSON]:
    return [r.to_json() for r in items]


@dataclass(frozen=True)
class NetworkPath:
    """An NCCL log's network path (``NcclLog.path``): its NCCL version, nodes and ranks, NICs and networks,
    GPUDirect lines, per-pair transports, per node pair links, rails, connections (5,000 kept), channels, rings and
    trees (5,000 kept), NVLS, settings, warnings and failures, algorithm choices, tuning, graph search, topology
    links, refused P2P pairs, nccl-tests' results and the parse's counters; a merged log's files (``sources``) and,
    for a run's logs (``nccl_step.analyze_logs``), the files the job was merged from and those left out (both only
    when there are several)."""

    version: str | None
    version_raw: str | None
    nodes: tuple[PathNode, ...]
    ranks: tuple[Rank, ...]
    networks: Mapping[str, int]
    nics: tuple[NcclNic, ...]
    net_notes: tuple[NetNote, ...]
    providers: Mapping[str, int | None]
    gdr: tuple[Gdr, ...]
    pairs: tuple[Pair, ...]
    node_links: tuple[PathNodeLink, ...]
    rails: Mapping[str, Mapping[str, list[int]]]  # host -> rank (as text) -> its NICs
    connections: tuple[Connection, ...]
    connections_total: int
    nchannels: int | None
    channel_counts: Mapping[str, int]
    rings: tuple[Ring, ...]
    trees: tuple[Tree, ...]
    nvls: Mapping[str, int]
    env: tuple[EnvVar, ...]
    warnings: tuple[Warn, ...]
    warning_counts: Mapping[str, int]
    failures: tuple[Failure, ...]
    algo_calls: tuple[AlgoCall, ...]
    tuning: tuple[Tuning, ...]
    graphs: tuple[Graph, ...]
    topology_links: Mapping[str, TopologyLinks]
    p2p_refused: tuple[tuple[str | int | None, ...], ...]  # (host, device, device, count)
    nccl_tests: NcclTests
    counters: Mapping[str, int]
    sources: tuple[Source, ...] | None = field(default=None, metadata=_OPTIONAL)
    files: tuple[PathFile, ...] | None = field(default=None, metadata=_OPTIONAL)
    left_out: tuple[PathLeftOut, ...] | None = field(default=None, metadata=_OPTIONAL)

    def to_json(self) -> JSON:
        out: JSON = {
            "version": self.version,
            "version_raw": self.version_raw,
            "nodes": _records(self.nodes),
            "ranks": _records(self.ranks),
            "networks": dict(self.networks),
            "nics": _records(self.nics),
            "net_notes": _records(self.net_notes),
            "providers": dict(self.providers),
            "gdr": _records(self.gdr),
            "pairs": _records(self.pairs),
            "node_links": [{**n} for n in self.node_links],
            "rails": {h: {r: list(n) for r, n in ranks.items()} for h, ranks in self.rails.items()},
            "connections": _records(self.connections),
            "connections_total": self.connections_total,
            "nchannels": self.nchannels,
            "channel_counts": dict(self.channel_counts),
            "rings": _records(self.rings),
            "trees": _records(self.trees),
            "nvls": dict(self.nvls),
            "env": _records(self.env),
            "warnings": _records(self.warnings),
            "warning_counts": dict(self.warning_counts),
            "failures": _records(self.failures),
            "algo_calls": _records(self.algo_calls),
            "tuning": _records(self.tuning),
            "graphs": _records(self.graphs),
            "topology_links": {k: {**v} for k, v in self.topology_links.items()},
            "p2p_refused": [list(p) for p in self.p2p_refused],
            "nccl_tests": self.nccl_tests.to_json(),
            "counters": dict(self.counters),
        }
        if self.sources is not None:
            out["sources"] = _records(self.sources)
        if self.files is not None:
            out["files"] = [{**f} for f in self.files]
        if self.left_out is not None:
            out["left_out"] = [{**x} for x in self.left_out]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NetworkPath:
        def each(key: str, record: type[_Record]) -> tuple[Any, ...]:
            return tuple(record.from_json(x) for x in data[key])

        def opt(key: str) -> tuple[Any, ...] | None:
            return None if data.get(key) is None else tuple(data[key])

        return cls(
            version=data["version"],
            version_raw=data["version_raw"],
            nodes=each("nodes", PathNode),
            ranks=each("ranks", Rank),
            networks=data["networks"],
            nics=each("nics", NcclNic),
            net_notes=each("net_notes", NetNote),
            providers=data["providers"],
            gdr=each("gdr", Gdr),
            pairs=each("pairs", Pair),
            node_links=tuple(data["node_links"]),
            rails=data["rails"],
            connections=each("connections", Connection),
            connections_total=data["connections_total"],
            nchannels=data["nchannels"],
            channel_counts=data["channel_counts"],
            rings=each("rings", Ring),
            trees=each("trees", Tree),
            nvls=data["nvls"],
            env=each("env", EnvVar),
            warnings=each("warnings", Warn),
            warning_counts=data["warning_counts"],
            failures=each("failures", Failure),
            algo_calls=each("algo_calls", AlgoCall),
            tuning=each("tuning", Tuning),
            graphs=each("graphs", Graph),
            topology_links=data["topology_links"],
            p2p_refused=tuple(tuple(p) for p in data["p2p_refused"]),
            nccl_tests=NcclTests.from_json(data["nccl_tests"]),
            counters=data["counters"],
            sources=None if data.get("sources") is None else each("sources", Source),
            files=opt("files"),
            left_out=opt("left_out"),
        )


@dataclass(frozen=True)
class RunNetworkPath:
    """The run's network path (``nccl_step.run_network_path``): the first log's report and its job's path, the
    nsys reports it joins (and those it cannot, with why), what crosses nodes, and each link's achieved bandwidth
    next to its transport (``nccl_step.achieved_links``)."""

    report: str
    path: NetworkPath = field(metadata={"json": {"flat": True}})  # its keys beside ``report``
    not_joined: tuple[NotJoined, ...] | None = field(default=None, metadata=_OPTIONAL)
    joined: tuple[JoinedReport, ...] | None = field(default=None, metadata=_OPTIONAL)
    inter_node_traffic: InterNodeTraffic | None = field(default=None, metadata=_OPTIONAL)
    links: tuple[PathLink, ...] | None = field(default=None, metadata=_OPTIONAL)
    links_join: LinksJoin | None = field(default=None, metadata=_OPTIONAL)

    def to_json(self) -> JSON:
        out: JSON = {"report": self.report, **self.path.to_json()}
        if self.not_joined is not None:
            out["not_joined"] = [{**x} for x in self.not_joined]
        if self.joined is not None:
            out["joined"] = [{**j} for j in self.joined]
        if self.inter_node_traffic is not None:
            out["inter_node_traffic"] = {**self.inter_node_traffic}
        if self.links is not None:
            out["links"] = [{**k} for k in self.links]
        if self.links_join is not None:
            out["links_join"] = {**self.links_join}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunNetworkPath:
        def opt(key: str) -> tuple[Any, ...] | None:
            return None if data.get(key) is None else tuple(data[key])

        run_keys = ("report", "not_joined", "joined", "inter_node_traffic", "links", "links_join")
        return cls(
            report=data["report"],
            path=NetworkPath.from_json({k: v for k, v in data.items() if k not in run_keys}),
            not_joined=opt("not_joined"),
            joined=opt("joined"),
            inter_node_traffic=data.get("inter_node_traffic"),
            links=opt("links"),
            links_join=data.get("links_join"),
        )


__all__ = [
    "AlgoCall",
    "Connection",
    "EnvVar",
    "Failure",
    "Gdr",
    "Graph",
    "NcclTests",
    "NetNote",
    "NetworkPath",
    "NcclNic",
    "NicGdr",
    "Pair",
    "PathFile",
    "PathLeftOut",
    "PathNode",
    "Rank",
    "Ring",
    "RunNetworkPath",
    "Source",
    "TestsRow",
    "Tree",
    "Tuning",
    "Warn",
]
