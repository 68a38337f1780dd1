"""What one pass over an NCCL log keeps (``Parsed``), its caps, and the small pieces of the grammar the
line handlers share (transport strings, WARN kinds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, Required, TypedDict

from analysis.readers.nccl.lines import int_or_none
from analysis.readers.nccl.tables import TestsTable

MAX_CONNECTIONS = 200_000      # distinct (channel, pair, direction, transport) rows kept
MAX_WARNINGS_PER_KIND = 50     # WARN lines kept per kind (all are counted)
MAX_FAILURE_LINES = 100        # non-NCCL failure lines kept (job step cancelled, exceptions ...)
MAX_SMALL = 10_000             # any other per-item table (rings, GDR lines, NICs, algo/size pairs ...)
MAX_RANKS = 100_000            # (communicator, rank) rows and (channel, rank) tree rows
MAX_CONN_TEXT = 256            # text kept per connection (its line, its transport)
MAX_TEXT = 512                 # longest text kept from one line in a table cell
_TABLE_START = set("0123456789.-N")

# NCCL's algorithm and protocol numbers in TUNING lines (``Algo 1 proto 2``), src/include/devcomm.h.
ALGO_NAMES = {0: "Tree", 1: "Ring", 2: "CollNetDirect", 3: "CollNetChain", 4: "NVLS", 5: "NVLSTree", 6: "PAT"}
PROTO_NAMES = {0: "LL", 1: "LL128", 2: "Simple"}

# WARN kinds, by a phrase of the message, in the order they are tried; and what each means.
WARN_KINDS: tuple[tuple[str, str], ...] = (
    ("unable to register memory", "mr_registration"),
    ("ibv_reg_mr", "mr_registration"),
    ("ibv_create_cq", "ibv_create_cq"),
    ("ibv_modify_qp", "ibv_modify_qp"),
    ("ibv_create_qp", "ibv_create_qp"),
    ("completion with error", "wc_error"),
    ("no route to host", "no_route"),
    ("connection refused", "connection_refused"),
    ("connection closed by remote peer", "connection_closed"),
    ("connection reset", "connection_closed"),
    ("failed to open libibverbs", "no_ibverbs"),
    ("timeout", "timeout"),
    ("timed out", "timeout"),
    ("out of memory", "oom"),
    ("cuda failure", "cuda_error"),
    ("invalid usage", "invalid_usage"),
)
FAILURE_PHRASES = ("NCCL error", "NCCL failure", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError",
                   "ncclRemoteError", "unhandled system error", "unhandled cuda error", "CANCELLED",
                   "Segmentation fault", "Watchdog caught collective operation timeout", "Aborted")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT]


def warn_kind(message: str) -> str:
    low = message.lower()
    for phrase, kind in WARN_KINDS:
        if phrase in low:
            return kind
    return "other"


class Transport(TypedDict):
    """A connection's transport text in parts (``parse_transport``)."""

    transport: str
    kind: str
    net: str | None
    nic: int | None
    proxy_rank: int | None
    gdr: bool
    shared: bool
    mode: str | None
    read: bool


def parse_transport(text: str) -> Transport:
    """``NET/IB/2(0)/GDRDMA``, ``NET/AWS Libfabric/0/GDRDMA/Shared``, ``P2P/CUMEM/read``, ``SHM/direct/direct``
    into its parts: kind, net name, NIC index, PXN proxy rank, GDR, shared, P2P mode, read."""
    parts = text.strip().split("/")
    kind = parts[0].strip().upper() if parts else ""
    out: Transport = {"transport": text.strip()[:MAX_CONN_TEXT], "kind": kind, "net": None, "nic": None,
                           "proxy_rank": None, "gdr": False, "shared": False, "mode": None, "read": False}
    rest = [p.strip() for p in parts[1:]]
    flags = {p.lower() for p in rest}
    out["gdr"] = "gdrdma" in flags
    out["shared"] = "shared" in flags
    out["read"] = "read" in flags
    if kind in ("NET", "COLLNET"):
        if rest:
            out["net"] = rest[0]
        if len(rest) > 1:
            dev = rest[1]
            paren = dev.find("(")
            if paren > 0 and dev.endswith(")"):
                out["proxy_rank"] = int_or_none(dev[paren + 1:-1])
                dev = dev[:paren]
            out["nic"] = int_or_none(dev)
    elif rest:
        out["mode"] = rest[0]
    return out


# The rows one pass keeps, one type per table (``ingest`` writes each as its table's columns, ``schema``): built
# as they are stored, and the counts in them (repeats, calls, per-value counts) grow as the pass reads on.


class RankRow(TypedDict):
    """A rank of a communicator (``ncclCommInitRank``/``comm 0x..`` lines): its process, device, bus id."""

    comm_id: str
    rank: int
    nranks: int | None
    host: str | None
    pid: int | None
    cuda_dev: int | None
    nvml_dev: int | None
    bus_id: str | None
    label: int | None
    line: int
    complete: bool


class LabelRow(TypedDict):
    """A launcher task label (srun ``N:``, mpirun ``[1,N]``) and the first process that printed under it."""

    label: int
    host: str
    pid: int | None
    dev: int | None
    line: int


class NicRow(TypedDict):
    """A NIC a ``NET/<net> : Using [i]name:port/link`` line or an IB detail line lists."""

    host: str | None
    net: str
    index: int
    name: str
    port: int | None
    link: str | None
    speed_mbps: int | None
    virtual: bool
    line: int


class NetNoteRow(TypedDict):
    """A net line that is no NIC: ``No device found``, the plugin's provider and its NIC count, a plugin loaded."""

    key: tuple[str, str, str | None]
    kind: str
    what: str
    host: str | None
    count: int | None
    line: int
    text: str
    repeats: int


class GdrRow(TypedDict):
    """A ``GPU Direct RDMA Enabled/Disabled for GPU .. / HCA ..`` (scope ``gpu``) or ``for HCA ..`` line."""

    host: str | None
    rank_dev: int | None
    enabled: bool
    scope: str | None
    gpu: str | None
    hca: int | None
    hca_name: str | None
    distance: int | None
    level: int | None
    op: str | None
    reason: str | None
    line: int
    read: int | None
    text: str
    repeats: int


class ConnectionRow(Transport):
    """A ``Channel 00/0 : 0[0] -> 1[1] via ...`` line: the pair, the side that printed it, its transport."""

    channel: int
    conn: int | None
    src: int
    dst: int
    src_tag: str | None
    dst_tag: str | None
    direction: str | None
    host: str | None
    pid: int | None
    dev: int | None
    label: int | None
    line: int
    text: str


class RingRow(TypedDict):
    """A channel's ring (the widest printed for it)."""

    channel: int
    ranks: list[int]
    line: int
    size: int


class TreeRow(TypedDict):
    """A rank's place in a channel's tree: its parent and children."""

    channel: int
    rank: int
    up: int | None
    down: list[int]
    line: int


class EnvRow(TypedDict):
    """An ``NCCL_*`` setting: its first value, how often it was printed and each value's count (16 kept), and who
    set it (the environment, or the net plugin: then no value or line where the log printed none)."""

    name: str
    value: str | None
    line: int | None
    count: int
    values: dict[str, int]
    set_by: NotRequired[str]


class WarnRow(TypedDict):
    """A ``NCCL WARN`` line: its kind (``warn_kind``), message, printing process and source location."""

    line: int
    kind: str
    message: str
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None
    label: int | None
    source: str | None


class FailureRow(TypedDict):
    """A line outside NCCL's own that says the job failed (``FAILURE_PHRASES``)."""

    line: int
    label: int | None
    kind: str
    text: str


class AlgoCallRow(TypedDict):
    """Calls of one collective and size with one algorithm, protocol and channel count, and the first line."""

    coll: str | None
    bytes: int | None
    algo: str
    proto: str | None
    channels: int | None
    calls: int
    line: int


class TuningRow(TypedDict):
    """A cell of NCCL's TUNING table: a collective, algorithm and protocol's latency and bandwidth."""

    coll: str
    algo: str | None
    proto: str
    latency_us: float | None
    bw_gbs: float | None
    line: int


class GraphRow(TypedDict, total=False):
    """A graph search's result line (``Pattern 4, crossNic 0, nChannels 12, bw 40.0/40.0, type NVL/PIX ...``):
    the parts the line has."""

    line: Required[int]
    pattern: int | None
    cross_nic: int | None
    nchannels: int | None
    bw_intra: float | None
    bw_inter: float | None
    type: str


class TopoLinkRow(TypedDict):
    """Topology links of one kind (NVL, PCI, SYS, NET ...): how many, the fastest, and their targets' counts."""

    kind: str
    count: int
    max_bw: float | None
    targets: dict[str, int]


@dataclass
class Parsed:
    """What one pass found, as rows ready for the DuckDB tables (one ``*Row`` type per table)."""

    lines: int = 0
    nccl_lines: int = 0
    digest: str = ""                                              # blake2b of the file's bytes
    counters: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)       # normalized version -> lines
    version_raw: str | None = None
    ranks: dict[tuple[str, int], RankRow] = field(default_factory=dict)  # (commId, rank) -> facts
    labels: dict[int, LabelRow] = field(default_factory=dict)  # launcher task label -> first origin
    hosts: set[str] = field(default_factory=set)                    # hosts named by line prefixes (capped)
    nics: dict[tuple[str | None, str, int], NicRow] = field(default_factory=dict)
    networks: dict[str, int] = field(default_factory=dict)
    oob: dict[str, str] = field(default_factory=dict)            # host -> OOB/bootstrap interface
    net_notes: list[NetNoteRow] = field(default_factory=list)  # "No device found", provider lines
    gdr: list[GdrRow] = field(default_factory=list)
    connections: dict[tuple, ConnectionRow] = field(default_factory=dict)
    rings: dict[int, RingRow] = field(default_factory=dict)
    trees: dict[tuple[int, int], TreeRow] = field(default_factory=dict)
    channel_counts: dict[str, int] = field(default_factory=dict)
    env: dict[str, EnvRow] = field(default_factory=dict)
    warnings: list[WarnRow] = field(default_factory=list)
    warning_counts: dict[str, int] = field(default_factory=dict)
    warning_procs: dict[tuple[str, str | None, int | None, int | None], int] = field(default_factory=dict)
    failures: list[FailureRow] = field(default_factory=list)
    algo_calls: dict[tuple, AlgoCallRow] = field(default_factory=dict)
    tuning: dict[tuple, TuningRow] = field(default_factory=dict)
    graphs: list[GraphRow] = field(default_factory=list)
    topo_links: dict[str, TopoLinkRow] = field(default_factory=dict)
    p2p_refused: dict[tuple[str | None, str, str], int] = field(default_factory=dict)
    nvls: dict[str, int] = field(default_factory=dict)  # NVLS facts' counts ('connected': 1, its first line)
    tests: TestsTable = field(default_factory=TestsTable)
