"""The settings and tuning lines of an NCCL log: env overrides, per-call algorithm/protocol, TUNING tables,
the graph search, topology links, NVLS, channel counts. A part of ``LogParser``."""

from __future__ import annotations

from analysis.readers.nccl.lines import Origin, float_or_none, int_or_none
from analysis.readers.nccl.parsed import ALGO_NAMES, MAX_SMALL, PROTO_NAMES, GraphRow, Parsed, _cut


class SettingLines:
    """The handlers of env, TUNING, COLL decision, GRAPH, topology and NVLS lines."""

    r: Parsed
    _last_coll: dict[str, str]
    _tuning_algos: list[str]
    _tuning_protos: list[str]

    def _host_seen(self, host: str | None) -> None:
        raise NotImplementedError

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
        algo_id = int_or_none(algo) if algo is not None else None
        proto_id = int_or_none(proto) if proto is not None else None
        if algo_id is not None:
            algo = ALGO_NAMES.get(algo_id, algo)
        elif algo is not None:
            algo = algo.capitalize() if algo.isupper() and algo not in ("NVLS", "PAT") else algo
            algo = {"Collnet_direct": "CollNetDirect", "Collnet_chain": "CollNetChain",
                    "Nvls_tree": "NVLSTree"}.get(algo, algo)
        if proto_id is not None:
            proto = PROTO_NAMES.get(proto_id, proto)
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
        row: GraphRow = {"line": lineno}
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
            if len(words) >= 3 and int_or_none(words[0]) is not None:
                key = "_".join(words[1:-1] if words[-1] == "channels" else words[1:])
                self.r.channel_counts[key] = max(self.r.channel_counts.get(key, 0), int_or_none(words[0]) or 0)

    def _p2p_refused(self, msg: str, o: Origin) -> None:
        rest = msg[len("Could not enable P2P between dev "):]
        a, _, b = rest.partition(" and dev ")
        key = (o.host, _cut(a.strip()), _cut(b.strip()))
        if key in self.r.p2p_refused or len(self.r.p2p_refused) < MAX_SMALL:
            self.r.p2p_refused[key] = self.r.p2p_refused.get(key, 0) + 1
