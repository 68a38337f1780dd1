"""An ingested NCCL log as frozen data (``NcclLog``, read back by ``store.load``: its records are those of
``analysis.network_path``) and its network path (``NcclLog.path``)."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar, overload

from analysis.network_path import (
    AlgoCall,
    Connection,
    EnvVar,
    Failure,
    Gdr,
    Graph,
    NcclNic,
    NcclTests,
    NetNote,
    NetworkPath,
    NicGdr,
    Pair,
    PathNode,
    Rank,
    Ring,
    Source,
    TestsRow,
    Tree,
    Tuning,
    Warn,
)
from analysis.report_types import PathNodeLink, TopologyLinks


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


def nccl_tests(name: str | None, version: str | None, layout: str | None, avg_busbw: float | None,
               avg_line: int | None, out_of_bounds: str | None, rows: tuple[TestsRow, ...]) -> NcclTests:
    """nccl-tests' lines in a log (the test's name and version, its table's layout, the average busbw line and the
    out-of-bounds count) with its result rows and their peak bus bandwidth (GB/s), out-of-place and in-place, and
    where the out-of-place peak was."""
    oop = [(r.oop_busbw, r) for r in rows if r.oop_busbw is not None]
    ip = [r.ip_busbw for r in rows if r.ip_busbw is not None]
    best = max(oop, key=lambda t: t[0]) if oop else None
    return NcclTests(name, version, layout, avg_busbw, avg_line, out_of_bounds,
                     peak_busbw=best[0] if best else None, peak_busbw_in_place=max(ip) if ip else None,
                     peak_size=best[1].size if best else None, peak_line=best[1].line if best else None, rows=rows)


@dataclass(frozen=True)
class NcclLog:
    """Everything read from one NCCL debug log."""

    version: str | None
    version_raw: str | None
    ranks: tuple[Rank, ...]
    nics: tuple[NcclNic, ...]
    networks: Mapping[str, int]
    oob: Mapping[str, str]
    net_notes: tuple[NetNote, ...]
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
    tests: NcclTests   # nccl-tests' own lines, peak bus bandwidth and result rows (``nccl_tests``)
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
        return {n.what: n.count for n in self.net_notes if n.kind == "provider"}

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

    # ------------------------------------------------------------------ the network path
    def path(self) -> NetworkPath:
        """The run's network path: the log's records with what is derived from them (nodes, pairs, rails, each
        NIC's GPUDirect lines, each warning's NIC); in a log merged from several files every line placed in its
        file (a pair's first ``lines`` stay the merged log's numbers). Every string as found in the log: escape it
        where shown."""
        hosts = self.rank_hosts()
        gdr_by_nic: dict[tuple[str | None, int | None], list[NicGdr]] = {}
        for g in self.gdr:  # per GPU and per HCA, the line that decided GPUDirect for this NIC
            gdr_by_nic.setdefault((g.host, g.hca), []).append(
                self._placed(NicGdr(g.scope, g.gpu, g.enabled, g.distance, g.level, g.reason, g.line)))
        place = self._placed
        return NetworkPath(
            version=self.version,
            version_raw=self.version_raw,
            nodes=tuple(PathNode(h, tuple(sorted(r for r, hh in hosts.items() if hh == h)), self.oob.get(h))
                        for h in self.nodes()),
            ranks=self.ranks,
            networks=dict(self.networks),
            nics=tuple(place(dataclasses.replace(n, gdr=tuple(gdr_by_nic.get((n.host, n.index), []))))
                       for n in self.nics),
            net_notes=tuple(place(n) for n in self.net_notes),
            providers=self.providers(),
            gdr=tuple(place(g) for g in self.gdr),
            pairs=tuple(self.pairs()),
            node_links=tuple(self.node_links()),
            rails={h: {str(r): n for r, n in ranks.items()} for h, ranks in self.rails().items()},
            connections=tuple(place(c) for c in self.connections[:5000]),
            connections_total=len(self.connections),
            nchannels=self.nchannels(),
            channel_counts=dict(self.channel_counts),
            rings=tuple(place(r) for r in self.rings),
            trees=tuple(place(t) for t in self.trees[:5000]),
            nvls=dict(self.nvls),
            env=tuple(place(e) for e in self.env),
            warnings=tuple(place(dataclasses.replace(w, nic=self.nic_of_warning(w))) for w in self.warnings),
            warning_counts=dict(self.warning_counts),
            failures=tuple(place(f) for f in self.failures),
            algo_calls=tuple(place(a) for a in self.algo_calls),
            tuning=tuple(place(t) for t in self.tuning),
            graphs=tuple(place(g) for g in self.graphs),
            topology_links={k: {**v} for k, v in self.topo_links.items()},
            p2p_refused=self.p2p_refused,
            nccl_tests=self._tests(),
            counters=dict(self.counters),
            sources=self.sources or None,
        )

    def _tests(self) -> NcclTests:
        """nccl-tests' lines, peak and rows; in a merged log, the rows', peak's and average's lines in their files."""
        t = self.tests
        if not self.sources:
            return t
        peak_file, peak_line = self.where(t.peak_line)
        avg_file, avg_line = self.where(t.avg_line)
        return dataclasses.replace(t, rows=tuple(self._placed(r) for r in t.rows), peak_line=peak_line,
                                   peak_file=peak_file, avg_line=avg_line, avg_file=avg_file)

    def _placed(self, item: _Lined) -> _Lined:
        """A record of a merged log with its line in its file; a record of one file, or without a line, as it is."""
        if not self.sources or item.line is None:
            return item
        file, line = self.where(item.line)
        return item.in_file(file, line)


_Lined = TypeVar("_Lined", NicGdr, NcclNic, NetNote, Gdr, Connection, Ring, Tree, EnvVar, Warn, Failure, AlgoCall, Tuning,
                 Graph, TestsRow)
