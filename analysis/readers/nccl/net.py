"""The NET/GDR lines of an NCCL log: NICs, networks and providers, GPUDirect per GPU and per HCA, the OOB
interface. A part of ``LogParser``."""

from __future__ import annotations

from analysis.readers.nccl.lines import Origin, int_or_none
from analysis.readers.nccl.parsed import MAX_SMALL, GdrRow, NetNoteRow, Parsed, _cut


class NetLines:
    """The handlers of ``NET/...``, ``GPU Direct RDMA ...`` and ``Bootstrap`` lines."""

    r: Parsed
    _notes: dict[tuple, NetNoteRow]
    _gdr_rows: dict[tuple, GdrRow]
    _ofi_set: set[str]

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
        row: GdrRow = {"host": o.host, "rank_dev": o.dev, "enabled": enabled, "scope": None, "gpu": None,
                       "hca": None, "hca_name": None, "distance": None, "level": None, "op": None,
                       "reason": _cut(reason) if reason else None, "line": lineno,
                       "read": None, "text": _cut(msg), "repeats": 1}
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
            self._gdr_rows[key] = row
            self.r.gdr.append(row)

    def _bootstrap(self, msg: str, o: Origin) -> None:
        using = msg.find("Using ")
        if using >= 0 and o.host:
            self.r.oob.setdefault(o.host, _cut(msg[using + 6:].strip()))
