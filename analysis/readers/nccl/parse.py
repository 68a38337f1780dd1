"""The NCCL debug log grammar (NCCL 2.4 to 2.27, RCCL alike): one pass over the lines into bounded tables.

Every line is untrusted text: it is matched with ``str`` methods only, kept as data, and what is stored
is capped (distinct connections, warnings per kind, calls aggregated by size), so memory is bounded by
the caps and time is linear in the file's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analysis.readers.nccl.lines import (
    Origin,
    float_or_none,
    int_or_none,
    normalize_version,
    peel_label,
    rank_and_tag,
    strip_mpirun,
)
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


def parse_transport(text: str) -> dict[str, Any]:
    """``NET/IB/2(0)/GDRDMA``, ``NET/AWS Libfabric/0/GDRDMA/Shared``, ``P2P/CUMEM/read``, ``SHM/direct/direct``
    into its parts: kind, net name, NIC index, PXN proxy rank, GDR, shared, P2P mode, read."""
    parts = text.strip().split("/")
    kind = parts[0].strip().upper() if parts else ""
    out: dict[str, Any] = {"transport": text.strip()[:MAX_CONN_TEXT], "kind": kind, "net": None, "nic": None,
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
    failures: list[dict[str, Any]] = field(default_factory=list)
    algo_calls: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    tuning: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    topo_links: dict[str, dict[str, Any]] = field(default_factory=dict)
    p2p_refused: dict[tuple[str | None, str, str], int] = field(default_factory=dict)
    nvls: dict[str, Any] = field(default_factory=dict)
    tests: TestsTable = field(default_factory=TestsTable)


class LogParser:
    """Feed lines with ``feed``; read ``result`` at the end."""

    def __init__(self) -> None:
        self.r = Parsed()
        self._last_coll: dict[str, str] = {}  # the printing thread's prefix -> its last collective
        self._tuning_algos: list[str] = []
        self._tuning_protos: list[str] = []
        self._ofi_set: set[str] = set()
        self._seen: set[int] = set()  # hashes of connection and tree lines already read
        self._notes: dict[tuple, dict[str, Any]] = {}
        self._gdr_rows: dict[tuple, dict[str, Any]] = {}

    # ------------------------------------------------------------------ dispatch
    def feed(self, raw: str) -> None:
        r = self.r
        r.lines += 1
        lineno = r.lines
        if "]<std" in raw:
            raw = strip_mpirun(raw)
        first = raw[:1]
        label = None
        line = raw
        if first and not first.isalpha():  # a launcher label can only stand at a line's start
            label, line = peel_label(raw)
        at = line.find("NCCL INFO")
        if at < 0:
            at = line.find("NCCL WARN")
            if at < 0:
                self._plain(line, label, lineno)
                return
            level = "WARN"
        else:
            level = "INFO"
        head = line[:at]
        if head[:1] in _TABLE_START or head[:1] == " ":
            stripped = head.lstrip()
            if stripped[:1] in _TABLE_START and stripped.count(" ", 0, len(stripped.rstrip())) > 2:
                # A piece of an nccl-tests row with another thread's log line glued to its end.
                head = r.tests.glued(head, lineno, self.r.hosts)
        r.nccl_lines += 1
        origin = Origin(label, head)
        if label is not None and label not in r.labels and len(r.labels) < MAX_SMALL and origin.host is not None:
            r.labels[label] = {"label": label, "host": origin.host, "pid": origin.pid, "dev": origin.dev,
                               "line": lineno}
        msg = line[at + 9:].strip()
        if level == "WARN":
            self._warn(msg, origin, lineno, head)
        else:
            self._info(msg, origin, lineno)

    def _host_seen(self, host: str | None) -> None:
        if host is not None and host not in self.r.hosts and len(self.r.hosts) < 4096:
            self.r.hosts.add(host)

    def _plain(self, line: str, label: int | None, lineno: int) -> None:
        r = self.r
        s = line.strip()
        if not s:
            return
        if s.startswith("NCCL version "):
            self._version(s[13:], lineno)
            return
        if s[0] == "#" or r.tests.active:
            if r.tests.feed(s, lineno):
                return
        if "NCCL version " in s and ("error" in s or "Error" in s):
            self._version(s[s.find("NCCL version ") + 13:], lineno, weak=True)
        for phrase in FAILURE_PHRASES:
            if phrase in s:
                r.counters["failure_lines"] = r.counters.get("failure_lines", 0) + 1
                if len(r.failures) < MAX_FAILURE_LINES:
                    r.failures.append({"line": lineno, "label": label, "kind": phrase, "text": _cut(s)})
                return

    def _version(self, text: str, lineno: int, weak: bool = False) -> None:
        norm = normalize_version(text.replace(",", " "))
        if norm is None:
            return
        self.r.versions[norm] = self.r.versions.get(norm, 0) + 1
        if self.r.version_raw is None and not weak:
            self.r.version_raw = _cut(text.strip())

    # ------------------------------------------------------------------ INFO lines
    def _info(self, msg: str, o: Origin, lineno: int) -> None:
        c = msg[:1]
        if c == "C":
            if msg.startswith("Channel "):
                self._channel(msg, o, lineno)
                return
            if msg.startswith("Connected "):
                if "NVLS" in msg:
                    self.r.nvls["connected"] = True
                    self.r.nvls.setdefault("line", lineno)
                elif "CollNet" in msg:
                    self.r.channel_counts["collnet_connected"] = 1
                return
            if msg.startswith("Could not enable P2P between dev "):
                self._p2p_refused(msg, o)
                return
            if msg.startswith("CollNet ") and " via " in msg:
                # "CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA": a rank's link into the in-network tree
                counts = self.r.channel_counts
                counts["collnet_connections"] = counts.get("collnet_connections", 0) + 1
                return
        if c == "R" and msg.startswith("Ring "):
            self._channel(msg, o, lineno)
            return
        if c == "T":
            if msg.startswith("Trees"):
                self._trees(msg, o, lineno)
                return
            if msg.startswith("Tree "):
                self._tree_line(msg, o, lineno)
                return
        if ": opCount " in msg:
            if o.head in self._last_coll or len(self._last_coll) < MAX_SMALL:
                self._last_coll[o.head] = msg[:msg.find(":", 0, 64)]
            return
        if " Bytes -> Algo " in msg:
            self._algo(msg, o, lineno)
            return
        if " set by environment to " in msg:
            self._env(msg, lineno, o)
            return
        if msg.startswith("NET/"):
            self._net(msg, o, lineno)
            return
        if "GPU Direct RDMA " in msg:
            self._gdr(msg, o, lineno)
            return
        if msg.startswith("Using network "):
            name = _cut(msg[14:].strip())
            self.r.networks[name] = self.r.networks.get(name, 0) + 1
            return
        if msg.startswith("NCCL version "):
            self._version(msg[13:], lineno)
            return
        if msg.startswith(("ncclCommInitRank", "comm 0x", "ncclCommSplit", "ncclCommInitAll")):
            self._comm(msg, o, lineno)
            return
        if msg.startswith("Bootstrap"):
            self._bootstrap(msg, o)
            return
        if msg.startswith("Pattern "):
            self._pattern(msg, lineno)
            return
        if "|" in msg:
            self._tuning(msg, lineno)
            return
        if "NVLS" in msg:
            self._nvls(msg, o, lineno)
            return
        if " coll channels" in msg:
            self._channel_summary(msg)
            return
        if "NVL[" in msg or "PCI[" in msg or "SYS[" in msg or "NET[" in msg:
            self._topo(msg)
            return

    # ------------------------------------------------------------------ channels, rings, connections
    def _channel(self, msg: str, o: Origin, lineno: int) -> None:
        colon = msg.find(" : ")
        if colon < 0:
            return
        left = msg[:colon].split()           # ["Channel", "00/24"] or ["Ring", "00"]
        right = msg[colon + 3:]
        if len(left) < 2:
            return
        chan_text, _, of_text = left[1].partition("/")
        channel = int_or_none(chan_text)
        if channel is None:
            return
        via = right.find(" via ")
        if via >= 0:
            h = hash(msg)  # a hash, not the text: the set stays small whatever the lines hold
            if h in self._seen:
                return  # the same connection printed again (by its other side, or a repeated init)
            if len(self._seen) < MAX_CONNECTIONS:
                self._seen.add(h)
            self._connection(msg, channel, int_or_none(of_text) if of_text else None, right[:via],
                             right[via + 5:], o, lineno)
            return
        if "->" in right:
            return  # "Ring 00 : 3 -> 0 -> 1": this rank's neighbours, the ring line says it all
        r = self.r
        if left[0] == "Channel" and of_text:
            total = int_or_none(of_text)
            if total is not None and total > r.channel_counts.get("declared", 0):
                r.channel_counts["declared"] = total
        known = r.rings.get(channel)
        tokens = right.split()
        if known is not None and known["size"] >= len(tokens):
            return  # a ring of this channel with as many members is known (several communicators: the widest)
        if known is None and len(r.rings) >= MAX_SMALL:
            return
        members = [int_or_none(t) for t in tokens]
        if not members or any(m is None for m in members):
            return
        if known is None or len(members) > len(known["ranks"]):
            r.rings[channel] = {"channel": channel, "ranks": members, "line": lineno, "size": len(members)}

    def _connection(self, msg: str, channel: int, conn: int | None, pair: str, transport: str, o: Origin,
                    lineno: int) -> None:
        direction = None
        if pair.endswith("]"):
            bracket = pair.rfind("[")
            tag = pair[bracket + 1:-1]
            if tag in ("send", "receive", "recv"):
                direction = "recv" if tag != "send" else "send"
                pair = pair[:bracket]
        src_text, arrow, dst_text = pair.partition("->")
        if not arrow:
            return
        src, src_tag = rank_and_tag(src_text)
        dst, dst_tag = rank_and_tag(dst_text)
        if src is None or dst is None:
            return
        r = self.r
        self._host_seen(o.host)
        key = (channel, conn, src, dst, direction, transport)
        if key in r.connections:
            return
        if len(r.connections) >= MAX_CONNECTIONS:
            r.counters["connections_dropped"] = r.counters.get("connections_dropped", 0) + 1
            return
        t = parse_transport(transport)
        row = {"channel": channel, "conn": conn, "src": src, "dst": dst, "src_tag": src_tag, "dst_tag": dst_tag,
               "direction": direction, "host": o.host, "pid": o.pid, "dev": o.dev, "label": o.label,
               "line": lineno, **t, "text": msg[:MAX_CONN_TEXT]}
        r.connections[key] = row

    def _trees(self, msg: str, o: Origin, lineno: int) -> None:
        # "Trees [0] 1/2/-1->0->-1 [1] ..." (2.8+: down->me->up), "[0] 3->7->4/-1/-1" (2.4: up->me->down),
        # "[0] -1/-1/-1->2->1|1->2->-1/-1/-1" (2.5-2.7: the two directions of one tree).
        h = hash(msg)
        if h in self._seen:
            return
        if len(self._seen) < MAX_CONNECTIONS:
            self._seen.add(h)
        for chunk in msg[5:].split("[")[1:]:
            close = chunk.find("]")
            if close < 0:
                continue
            channel = int_or_none(chunk[:close])
            body = chunk[close + 1:].strip().split("|", 1)[0].strip()
            if channel is None or not body:
                continue
            self._tree(channel, body, lineno)

    def _tree_line(self, msg: str, o: Origin, lineno: int) -> None:
        # "Tree 0 : -1 -> 0 -> 1/-1/-1": up -> me -> down.
        colon = msg.find(" : ")
        if colon < 0:
            return
        channel = int_or_none(msg[5:colon])
        if channel is not None:
            self._tree(channel, msg[colon + 3:].replace(" ", ""), lineno)

    def _tree(self, channel: int, body: str, lineno: int) -> None:
        parts = body.split("->")
        if len(parts) != 3:
            return
        a, me_text, b = parts
        me = int_or_none(me_text)
        if me is None:
            return
        if "/" in a and "/" not in b:
            down_text, up_text = a, b
        else:
            up_text, down_text = a, b
        up = int_or_none(up_text)
        downs = [d for d in (int_or_none(x) for x in down_text.split("/")) if d is not None and d >= 0]
        r = self.r
        if (channel, me) not in r.trees and len(r.trees) < MAX_RANKS:
            r.trees[(channel, me)] = {"channel": channel, "rank": me, "up": up if up is not None and up >= 0 else None,
                                      "down": downs, "line": lineno}

    # ------------------------------------------------------------------ network, GDR
    def _net(self, msg: str, o: Origin, lineno: int) -> None:
        slash = msg.find(" ", 4)
        net = msg[4:slash if slash > 0 else len(msg)].rstrip(":")
        body = msg[slash + 1:] if slash > 0 else ""
        if body.startswith(": "):
            body = body[2:]
        if "GPU Direct RDMA " in msg:
            self._gdr(msg, o, lineno)
            return
        if body.startswith("Using ") and "[" in body:
            self._nic_list(net, body[6:], o, lineno)
            return
        if net == "IB" and body.startswith("[") and "speed=" in body:
            self._nic_detail(body, o)
            return
        if body.startswith("Made virtual device"):
            self._nic_detail(body[len("Made virtual device"):].strip(), o, virtual=True)
            return
        low = body.lower()
        if "no device found" in low:
            self._note("no_device", net, msg, o, lineno)
        elif msg.startswith("NET/OFI "):
            text = msg[8:]
            if text.startswith("Selected Provider is "):
                provider = text[21:].split(" ", 1)[0]
                nics = None
                if "(found " in text:
                    nics = int_or_none(text[text.find("(found ") + 7:].split(" ", 1)[0])
                self._note("provider", provider, msg, o, lineno, count=nics)
            elif text.startswith("Setting NCCL_"):
                self._ofi_set.add(text[8:].split(" ", 1)[0].split("=", 1)[0])
            elif "Setting NCCL_TOPO_FILE" in text:
                self._ofi_set.add("NCCL_TOPO_FILE")
        elif msg.startswith("NET/Plugin") and ("Loaded" in msg or "Plugin Path" in msg):
            self._note("plugin", net, msg, o, lineno)

    def _note(self, kind: str, what: str, msg: str, o: Origin, lineno: int, count: int | None = None) -> None:
        r = self.r
        key = (kind, what, o.host)
        note = self._notes.get(key)
        if note is not None:
            note["repeats"] += 1
        elif len(r.net_notes) < 200:
            note = {"key": key, "kind": kind, "what": _cut(what), "host": o.host, "count": count,
                    "line": lineno, "text": _cut(msg), "repeats": 1}
            self._notes[key] = note
            r.net_notes.append(note)

    def _nic_list(self, net: str, body: str, o: Origin, lineno: int) -> None:
        # "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eno8303:192.168.0.3<0>" or "[0]ipogif0:148.187.44.46<0>"
        nic_part, _, oob = body.partition("; OOB ")
        if oob and o.host:
            self.r.oob.setdefault(o.host, _cut(oob.strip()))
        for chunk in nic_part.split("[")[1:]:
            close = chunk.find("]")
            index = int_or_none(chunk[:close]) if close > 0 else None
            if index is None:
                continue
            spec = chunk[close + 1:].strip()
            if net == "Socket":
                name, _, _addr = spec.partition(":")
                port, link = None, "socket"
            else:
                name, _, rest = spec.partition(":")
                port_text, _, link = rest.partition("/")
                port = int_or_none(port_text)
            key = (o.host, net, index)
            if key not in self.r.nics and len(self.r.nics) < MAX_SMALL:
                self.r.nics[key] = {"host": o.host, "net": net, "index": index, "name": _cut(name),
                                    "port": port, "link": _cut(link.strip()) or None, "speed_mbps": None,
                                    "virtual": False, "line": lineno}

    def _nic_detail(self, body: str, o: Origin, virtual: bool = False) -> None:
        # "[0] mlx5_0:uverbs0:1/RoCE provider=Mlx5 speed=100000 ..." / "[2] name=mlx5_0+mlx5_1 speed=200000 ndevs=2"
        close = body.find("]")
        index = int_or_none(body[1:close]) if body.startswith("[") and close > 0 else None
        if index is None:
            return
        fields = body[close + 1:].split()
        speed = None
        name = None
        for f in fields:
            if f.startswith("speed="):
                speed = int_or_none(f[6:])
            elif f.startswith("name="):
                name = f[5:]
        if name is None and fields:
            name = fields[0].split(":", 1)[0]
        key = (o.host, "IB", index)
        nic = self.r.nics.get(key)
        if nic is None:
            if len(self.r.nics) >= MAX_SMALL:
                return
            link = None
            if fields and "/" in fields[0]:
                link = fields[0].rsplit("/", 1)[1]
            nic = self.r.nics[key] = {"host": o.host, "net": "IB", "index": index, "name": _cut(name or ""),
                                      "port": None, "link": link, "speed_mbps": None, "virtual": virtual,
                                      "line": self.r.lines}
        if speed is not None:
            nic["speed_mbps"] = speed
        if virtual and name and nic["name"] != name:
            return

    def _gdr(self, msg: str, o: Origin, lineno: int) -> None:
        i = msg.find("GPU Direct RDMA ")
        rest = msg[i + 16:]
        enabled = rest.startswith("Enabled")
        rest = rest.split(" for ", 1)[1] if " for " in rest else ""
        reason = None
        paren = rest.find("(")
        if paren >= 0:
            reason = rest[paren + 1:rest.find(")", paren)] if ")" in rest[paren:] else rest[paren + 1:]
        row: dict[str, Any] = {"host": o.host, "rank_dev": o.dev, "enabled": enabled, "scope": None, "gpu": None,
                               "hca": None, "hca_name": None, "distance": None, "level": None, "op": None,
                               "reason": _cut(reason) if reason else None, "line": lineno,
                               "read": None, "text": _cut(msg)}
        if rest.startswith("GPU "):
            row["scope"] = "gpu"
            gpu_text, _, hca_text = rest[4:].partition(" / HCA ")
            row["gpu"] = _cut(gpu_text.strip())
            hca_bits = hca_text.split()
            if hca_bits:
                row["hca"] = int_or_none(hca_bits[0])
            q = hca_text.find("'")
            if q >= 0:
                row["hca_name"] = _cut(hca_text[q + 1:hca_text.find("'", q + 1)])
            if reason and reason.startswith("distance "):
                bits = reason.split()
                if len(bits) >= 4:
                    row["distance"] = int_or_none(bits[1])
                    row["op"] = bits[2]
                    row["level"] = int_or_none(bits[3])
            if ", read " in msg:
                row["read"] = int_or_none(msg[msg.rfind(", read ") + 7:])
        elif rest.startswith("HCA "):
            row["scope"] = "hca"
            bits = rest[4:].split()
            if bits:
                row["hca"] = int_or_none(bits[0])
            q = rest.find("'")
            if q >= 0:
                row["hca_name"] = _cut(rest[q + 1:rest.find("'", q + 1)])
        else:
            return
        key = (row["host"], row["scope"], row["gpu"], row["hca"], row["enabled"], row["reason"])
        seen = self._gdr_rows.get(key)
        if seen is not None:
            seen["repeats"] += 1
        elif len(self.r.gdr) < MAX_SMALL:
            row["repeats"] = 1
            self._gdr_rows[key] = row
            self.r.gdr.append(row)

    def _bootstrap(self, msg: str, o: Origin) -> None:
        using = msg.find("Using ")
        if using >= 0 and o.host:
            self.r.oob.setdefault(o.host, _cut(msg[using + 6:].strip()))

    # ------------------------------------------------------------------ ranks
    def _comm(self, msg: str, o: Origin, lineno: int) -> None:
        words = msg.split()
        facts: dict[str, Any] = {}
        for i in range(len(words) - 1):
            w = words[i]
            if w in ("rank", "nranks", "nRanks", "cudaDev", "nvmlDev", "busId", "commId", "comm", "nNodes",
                     "localRanks", "localRank"):
                facts.setdefault(w, words[i + 1])
        rank = int_or_none(facts.get("rank", ""))
        if rank is None:
            return
        # Before 2.7 there is no commId: the world communicator is the one of that size.
        comm_id = facts.get("commId") or f"nranks={facts.get('nranks') or facts.get('nRanks') or '?'}"
        key = (comm_id, rank)
        r = self.r
        row = r.ranks.get(key)
        if row is None:
            if len(r.ranks) >= MAX_RANKS:
                return
            row = r.ranks[key] = {"comm_id": _cut(comm_id), "rank": rank, "nranks": None, "host": o.host,
                                  "pid": o.pid, "cuda_dev": None, "nvml_dev": None, "bus_id": None,
                                  "label": o.label, "line": lineno, "complete": False}
        for src, dst in (("nranks", "nranks"), ("nRanks", "nranks"), ("cudaDev", "cuda_dev"), ("nvmlDev", "nvml_dev")):
            if src in facts and row[dst] is None:
                row[dst] = int_or_none(facts[src])
        if "busId" in facts and row["bus_id"] is None:
            row["bus_id"] = _cut(facts["busId"])
        self._host_seen(o.host)
        if row["host"] is None:
            row["host"] = o.host
            row["pid"] = o.pid
        if "nNodes" in facts:
            r.counters["nnodes"] = max(r.counters.get("nnodes", 0), int_or_none(facts["nNodes"]) or 0)
        if "Init COMPLETE" in msg:
            row["complete"] = True

    # ------------------------------------------------------------------ env, tuning, algo
    def _env(self, msg: str, lineno: int, o: Origin) -> None:
        name, _, value = msg.partition(" set by environment to ")
        name = name.strip().split()[-1] if name.strip() else ""
        if not name:
            return
        value = value.strip()
        if value.endswith("."):
            value = value[:-1]
        r = self.r
        row = r.env.get(name)
        if row is None:
            if len(r.env) >= 1000:
                return
            row = r.env[name] = {"name": _cut(name), "value": _cut(value), "line": lineno, "count": 0,
                                 "values": {}}
        row["count"] += 1
        if len(row["values"]) < 16:
            row["values"][_cut(value)] = row["values"].get(_cut(value), 0) + 1

    def _algo(self, msg: str, o: Origin, lineno: int) -> None:
        # 2.20: "2097152 Bytes -> Algo 1 proto 2 time 25.153601" (the call is the last opCount line);
        # 2.27: "AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}"
        self._host_seen(o.host)
        head, _, tail = msg.partition(" Bytes -> Algo ")
        coll = None
        if ":" in head:
            coll, _, head = head.partition(":")
        nbytes = int_or_none(head.strip().split()[-1]) if head.strip() else None
        words = tail.split()
        algo = words[0] if words else None
        proto = words[2] if len(words) > 2 and words[1] == "proto" else None
        if algo is not None and algo.isdigit():
            algo = ALGO_NAMES.get(int(algo), algo)
        elif algo is not None:
            algo = algo.capitalize() if algo.isupper() and algo not in ("NVLS", "PAT") else algo
            algo = {"Collnet_direct": "CollNetDirect", "Collnet_chain": "CollNetChain",
                    "Nvls_tree": "NVLSTree"}.get(algo, algo)
        if proto is not None and proto.isdigit():
            proto = PROTO_NAMES.get(int(proto), proto)
        elif proto is not None:
            proto = {"SIMPLE": "Simple", "LL": "LL", "LL128": "LL128"}.get(proto, proto)
        channels = None
        brace = tail.find("={")
        if brace >= 0:
            lo, _, hi = tail[brace + 2:tail.find("}", brace)].partition("..")
            if int_or_none(lo) is not None and int_or_none(hi) is not None:
                channels = int(hi) - int(lo) + 1
        if coll is None:
            coll = self._last_coll.get(o.head)
        coll = _cut(coll.strip()) if coll else None
        key = (coll, nbytes, algo, proto, channels)
        r = self.r
        row = r.algo_calls.get(key)
        if row is None:
            if len(r.algo_calls) >= MAX_SMALL:
                r.counters["algo_calls_dropped"] = r.counters.get("algo_calls_dropped", 0) + 1
                return
            row = r.algo_calls[key] = {"coll": coll, "bytes": nbytes, "algo": _cut(algo or ""), "proto": proto,
                                       "channels": channels, "calls": 0, "line": lineno}
        row["calls"] += 1

    def _tuning(self, msg: str, lineno: int) -> None:
        cells = [c.strip() for c in msg.split("|")]
        if len(cells) < 3:
            return
        head = cells[0]
        if head == "Algorithm":
            self._tuning_algos = [c for c in cells[1:] if c]
            return
        if head == "Protocol":
            self._tuning_protos = [c for c in cells[1:] if c]
            return
        if not self._tuning_protos or not head or not head.isalpha() or head == "Max NThreads":
            return
        values = [c for c in cells[1:] if c]
        nprot = 3
        r = self.r
        for i, value in enumerate(values):
            lat_text, slash, bw_text = value.partition("/")
            if not slash or i >= len(self._tuning_protos):
                continue
            algo = self._tuning_algos[i // nprot] if i // nprot < len(self._tuning_algos) else None
            key = (head, algo, self._tuning_protos[i])
            if key not in r.tuning and len(r.tuning) < MAX_SMALL:
                r.tuning[key] = {"coll": _cut(head), "algo": algo, "proto": self._tuning_protos[i],
                                 "latency_us": float_or_none(lat_text), "bw_gbs": float_or_none(bw_text),
                                 "line": lineno}

    # ------------------------------------------------------------------ topology, NVLS, misc
    def _pattern(self, msg: str, lineno: int) -> None:
        row: dict[str, Any] = {"line": lineno}
        for part in msg.split(","):
            key, _, value = part.strip().partition(" ")
            value = value.strip()
            if key == "Pattern":
                row["pattern"] = int_or_none(value)
            elif key == "crossNic":
                row["cross_nic"] = int_or_none(value)
            elif key == "nChannels":
                row["nchannels"] = int_or_none(value)
            elif key in ("bw", "speed"):
                intra, _, inter = value.partition("/")
                row["bw_intra"] = float_or_none(intra)
                row["bw_inter"] = float_or_none(inter)
            elif key == "type":
                row["type"] = _cut(value)
        if len(self.r.graphs) < 1000:
            self.r.graphs.append(row)

    def _topo(self, msg: str) -> None:
        s = msg.strip().lstrip("+").strip()
        kind, _, rest = s.partition("[")
        bw = float_or_none(rest.partition("]")[0])
        kind = kind.strip()
        if kind not in ("NVL", "PCI", "SYS", "NET", "C2C", "LOC"):
            return
        row = self.r.topo_links.setdefault(kind, {"kind": kind, "count": 0, "max_bw": None, "targets": {}})
        row["count"] += 1
        if bw is not None and (row["max_bw"] is None or bw > row["max_bw"]):
            row["max_bw"] = bw
        target = rest.partition("- ")[2].strip().split(" ", 1)[0]
        if target and len(row["targets"]) < 64:
            row["targets"][_cut(target)] = row["targets"].get(_cut(target), 0) + 1

    def _nvls(self, msg: str, o: Origin, lineno: int) -> None:
        n = self.r.nvls
        if "multicast support is available" in msg:
            n["available"] = n.get("available", 0) + 1
        elif "multicast support is not available" in msg:
            n["unavailable"] = n.get("unavailable", 0) + 1
        elif msg.startswith("NVLS Head"):
            n["heads"] = n.get("heads", 0) + 1

    def _channel_summary(self, msg: str) -> None:
        # "16 coll channels, 16 collnet channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer"
        for part in msg.split(","):
            words = part.split()
            if len(words) >= 3 and words[0].isdigit():
                key = "_".join(words[1:-1] if words[-1] == "channels" else words[1:])
                self.r.channel_counts[key] = max(self.r.channel_counts.get(key, 0), int(words[0]))

    def _p2p_refused(self, msg: str, o: Origin) -> None:
        rest = msg[len("Could not enable P2P between dev "):]
        a, _, b = rest.partition(" and dev ")
        key = (o.host, _cut(a.strip()), _cut(b.strip()))
        if key in self.r.p2p_refused or len(self.r.p2p_refused) < MAX_SMALL:
            self.r.p2p_refused[key] = self.r.p2p_refused.get(key, 0) + 1

    # ------------------------------------------------------------------ WARN
    def _warn(self, msg: str, o: Origin, lineno: int, head: str) -> None:
        r = self.r
        kind = warn_kind(msg)
        r.warning_counts[kind] = r.warning_counts.get(kind, 0) + 1
        if r.warning_counts[kind] > MAX_WARNINGS_PER_KIND:
            return
        where = None
        parts = head.split()
        if parts and ":" in parts[-1] and not parts[-1].startswith("["):
            where = _cut(parts[-1])
        r.warnings.append({"line": lineno, "kind": kind, "message": _cut(msg), "host": o.host, "pid": o.pid,
                           "tid": o.tid, "dev": o.dev, "label": o.label, "source": where})
