"""What one pass over an NCCL log keeps (``Parsed``), its caps, and the small pieces of the grammar the
line handlers share (transport strings, WARN kinds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

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


@dataclass
class Parsed:
    """What one pass found, as plain rows (tuples/dicts) ready for the DuckDB tables."""

    lines: int = 0
    nccl_lines: int = 0
    digest: str = ""                                              # blake2b of the file's bytes
    counters: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)       # normalized version -> lines
    version_raw: str | None = None
    ranks: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)  # (commId, rank) -> facts
    labels: dict[int, dict[str, Any]] = field(default_factory=dict)  # launcher task label -> first origin
    hosts: set[str] = field(default_factory=set)                    # hosts named by line prefixes (capped)
    nics: dict[tuple[str | None, str, int], dict[str, Any]] = field(default_factory=dict)
    networks: dict[str, int] = field(default_factory=dict)
    oob: dict[str, str] = field(default_factory=dict)            # host -> OOB/bootstrap interface
    net_notes: list[dict[str, Any]] = field(default_factory=list)  # "No device found", provider lines
    gdr: list[dict[str, Any]] = field(default_factory=list)
    connections: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    rings: dict[int, dict[str, Any]] = field(default_factory=dict)
    trees: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    channel_counts: dict[str, int] = field(default_factory=dict)
    env: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    warning_counts: dict[str, int] = field(default_factory=dict)
    warning_procs: dict[tuple[str, str | None, int | None, int | None], int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    algo_calls: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    tuning: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    topo_links: dict[str, dict[str, Any]] = field(default_factory=dict)
    p2p_refused: dict[tuple[str | None, str, str], int] = field(default_factory=dict)
    nvls: dict[str, Any] = field(default_factory=dict)
    tests: TestsTable = field(default_factory=TestsTable)
