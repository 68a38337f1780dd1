"""The NCCL debug log grammar (NCCL 2.4 to 2.27, RCCL alike): one pass over the lines into bounded tables.

Every line is untrusted text: it is matched with ``str`` methods only, kept as data, and what is stored
is capped (distinct connections, warnings per kind, calls aggregated by size), so memory is bounded by
the caps and time is linear in the file's size.
"""

from __future__ import annotations

from analysis.readers.nccl.lines import (
    Origin,
    int_or_none,
    normalize_version,
    peel_label,
    rank_and_tag,
    strip_mpirun,
)
from analysis.readers.nccl.net import NetLines
from analysis.readers.nccl.parsed import (
    _TABLE_START,
    FAILURE_PHRASES,
    MAX_CONN_TEXT,
    MAX_CONNECTIONS,
    MAX_FAILURE_LINES,
    MAX_RANKS,
    MAX_SMALL,
    MAX_WARNINGS_PER_KIND,
    ConnectionRow,
    GdrRow,
    NetNoteRow,
    Parsed,
    _cut,
    parse_transport,
    warn_kind,
)
from analysis.readers.nccl.tuning import SettingLines

# Re-exported: the caps and grammar pieces tests and callers name from here.
__all__ = ["MAX_CONNECTIONS", "MAX_WARNINGS_PER_KIND", "LogParser", "Parsed", "parse_transport", "warn_kind"]


class LogParser(NetLines, SettingLines):
    """Feed lines with ``feed``; read ``r`` (``Parsed``) at the end. The NET/GDR and the settings/tuning
    handlers live in ``net.NetLines`` and ``tuning.SettingLines``."""

    def __init__(self) -> None:
        self.r = Parsed()
        self._last_coll: dict[str, str] = {}  # the printing thread's prefix -> its last collective
        self._tuning_algos: list[str] = []
        self._tuning_protos: list[str] = []
        self._ofi_set: set[str] = set()
        self._seen: set[int] = set()  # hashes of connection and tree lines already read
        self._notes: dict[tuple, NetNoteRow] = {}
        self._gdr_rows: dict[tuple, GdrRow] = {}

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
        members = [m for m in (int_or_none(t) for t in tokens) if m is not None]
        if not members or len(members) < len(tokens):
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
        row: ConnectionRow = {"channel": channel, "conn": conn, "src": src, "dst": dst, "src_tag": src_tag, "dst_tag": dst_tag,
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

    # ------------------------------------------------------------------ ranks
    def _comm(self, msg: str, o: Origin, lineno: int) -> None:
        words = msg.split()
        facts: dict[str, str] = {}
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
        for name in ("nranks", "nRanks"):
            if name in facts and row["nranks"] is None:
                row["nranks"] = int_or_none(facts[name])
        if "cudaDev" in facts and row["cuda_dev"] is None:
            row["cuda_dev"] = int_or_none(facts["cudaDev"])
        if "nvmlDev" in facts and row["nvml_dev"] is None:
            row["nvml_dev"] = int_or_none(facts["nvmlDev"])
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

    # ------------------------------------------------------------------ WARN
    def _warn(self, msg: str, o: Origin, lineno: int, head: str) -> None:
        r = self.r
        kind = warn_kind(msg)
        r.warning_counts[kind] = r.warning_counts.get(kind, 0) + 1
        proc = (kind, o.host, o.pid, o.label)  # per process: several logs of one job count each process once
        if proc in r.warning_procs or len(r.warning_procs) < MAX_RANKS:
            r.warning_procs[proc] = r.warning_procs.get(proc, 0) + 1
        if r.warning_counts[kind] > MAX_WARNINGS_PER_KIND:
            return
        where = None
        parts = head.split()
        if parts and ":" in parts[-1] and not parts[-1].startswith("["):
            where = _cut(parts[-1])
        r.warnings.append({"line": lineno, "kind": kind, "message": _cut(msg), "host": o.host, "pid": o.pid,
                           "tid": o.tid, "dev": o.dev, "label": o.label, "source": where})
