"""NET003 and NET004: whether the path fits the hardware (rails between nodes, NVLink inside a node)."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.nccl.common import (
    RDMA_KINDS,
    NetRule,
    env_evidence,
    env_is,
    first_connection,
    intra_pairs,
    line_evidence,
    pair_text,
)
from analysis.readers.nccl.model import NcclLog
from analysis.results import NetChannelsFacts, NetPcieFacts, NetRailsFacts, NetShmFacts


class RailMisuse(NetRule):
    """Rails: GPUs sharing one NIC while others idle, cross-rail traffic without PXN, a GPU off its closest NIC.

    *Why it matters*: on a rail-optimized fabric NIC *k* of every node hangs off the same leaf switch, and
    each GPU has a NIC behind its own PCIe switch. Two GPUs on one NIC halve each one's bandwidth while
    another NIC idles; a message leaving on NIC *i* and arriving on NIC *j* crosses the spine (unless PXN
    forwards it over NVLink to the right rail's GPU); a GPU on a far NIC crosses the CPU.

    *How it is detected*: each inter-node connection line names the NIC its printer used (``NET/IB/k``;
    ``k(p)`` with PXN's proxy rank). Per node: a NIC used by several GPUs while RDMA NICs of that node carry
    nothing; a connection whose send side and receive side used different NIC indices without a proxy;
    a GPU whose NIC is not the one at the smallest distance in its ``GPU Direct RDMA ... (distance D)`` lines.
    """

    id = "NET003"
    verdict_order = 4
    name = "network.rails"
    summary = "GPUs share a NIC, traffic crosses rails without PXN, or a GPU is off its closest NIC"
    advice = ("Map one GPU to its own closest NIC (NCCL_IB_HCA lists which), keep NCCL_CROSS_NIC at its default "
              "on rail-optimized fabrics, and let PXN (NCCL_PXN_DISABLE=0) forward to the right rail.")
    thresholds = {"min_gpus_per_nic": Threshold(2, "count", "GPUs on one NIC (with idle NICs on the node) to report",
                                                minimum=2, maximum=1e6)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        hosts = log.rank_hosts()
        # (host, nic) -> ranks that used it for their own side of an inter-node connection
        users: dict[tuple[str, int], set[int]] = {}
        lines: dict[tuple[str, int], int] = {}
        sides: dict[tuple, dict[str, int]] = {}
        rank_nics: dict[int, set[int]] = {}
        for c in log.connections:
            if c.kind != "NET" or c.nic is None or c.direction is None:
                continue
            me = c.src if c.direction == "send" else c.dst
            host = hosts.get(me) or c.host
            if host is None or not log.is_inter_node(c.src, c.dst, c.kind):
                continue
            if c.proxy_rank is not None and c.proxy_rank != me:
                continue  # PXN: the NIC belongs to the proxy rank
            users.setdefault((host, c.nic), set()).add(me)
            lines.setdefault((host, c.nic), c.line)
            rank_nics.setdefault(me, set()).add(c.nic)
            if c.proxy_rank is None:
                sides.setdefault((c.channel, c.conn, c.src, c.dst), {})[c.direction] = c.nic
        findings: list[Finding] = []
        evidence: list[Evidence] = []
        problems: list[str] = []
        # Sharing while NICs idle
        shared = {k: v for k, v in users.items() if len(v) >= params["min_gpus_per_nic"]}
        texts = {c.line: c.text for c in log.connections} if shared else {}
        if shared:
            for (host, nic), ranks in sorted(shared.items()):
                # NICs the log lists (a net plugin lists none: its provider's NIC count stands for them)
                listed = [n for n in log.nics if n.host == host and n.kind in RDMA_KINDS and not n.virtual
                          and n.line is not None]
                provider_count = max((c or 0) for c in log.providers().values()) if log.providers() else 0
                used = {k[1] for k in users if k[0] == host}
                idle = [n for n in listed if n.index not in used]
                idle_count = max(len(idle), provider_count - len(used))
                if idle_count <= 0:
                    continue
                name = next((f"{n.name} ({n.kind})" for n in listed if n.index == nic), f"NIC {nic}")
                problems.append(f"on {host}, ranks {sorted(ranks)} share {name} while {fmt.count(idle_count)} RDMA NIC(s) "
                                f"carry nothing" + (f" ({', '.join(n.name for n in idle[:6])})" if idle else ""))
                evidence.append(line_evidence(lines[(host, nic)], texts.get(lines[(host, nic)]),
                                              rank=min(ranks), name=name, host=host))
        # Cross-rail without PXN
        cross = [(k, v) for k, v in sides.items() if "send" in v and "recv" in v and v["send"] != v["recv"]]
        if cross:
            (ch, _conn, src, dst), v = cross[0]
            problems.append(f"{fmt.count(len(cross))} connection(s) leave on one NIC index and arrive on another without PXN "
                            f"(e.g. channel {ch} {src}->{dst}: NIC {v['send']} -> NIC {v['recv']})")
            for c in log.connections:
                if c.channel == ch and c.src == src and c.dst == dst and c.kind == "NET":
                    evidence.append(line_evidence(c.line, c.text, rank=src, name=c.transport))
        # Off the closest NIC
        rank_rows = {x.rank: x for x in log.ranks}
        gdr_by_gpu: dict[tuple[str | None, str], list] = {}
        for g in log.gdr:
            if g.scope == "gpu" and g.distance is not None and g.gpu is not None:
                gdr_by_gpu.setdefault((g.host, g.gpu.lstrip("0")), []).append(g)
        for rank, nics in sorted(rank_nics.items()):
            r = rank_rows.get(rank)
            if r is None or not r.bus_id:
                continue
            mine = gdr_by_gpu.get((hosts.get(rank), r.bus_id.lstrip("0")), [])
            if len({g.hca for g in mine}) < 2:
                continue
            best = min(g.distance for g in mine if g.distance is not None)
            closest = {g.hca for g in mine if g.distance == best and g.hca is not None}
            far = sorted(n for n in nics if n not in closest)
            if far:
                problems.append(f"rank {rank} (GPU {r.bus_id}) uses NIC {far} though NIC {sorted(closest)} is closer "
                                f"(distance {best})")
                evidence.extend(line_evidence(g.line, g.text, rank=rank) for g in mine[:2])
        if problems:
            findings.append(self.finding("Rails: NIC sharing or cross-rail traffic", "; ".join(problems) + ".",
                                         evidence, severity="warning", total=len(problems), facts=NetRailsFacts(problems=problems)))
        return findings


NVLINK_HINTS = ("NVL",)


class IntraNodePath(NetRule):
    """Inside a node: SHM or PCIe where NVLink exists, P2P disabled by env, channels far below the topology.

    *Why it matters*: ``SHM`` copies through host memory and PCIe ``P2P`` runs at a fraction of NVLink; when
    NVLink joins the GPUs, either one leaves most of the intra-node bandwidth unused. ``NCCL_P2P_DISABLE=1``
    or ``NCCL_P2P_LEVEL`` forces it silently; a topology file or platform that declares a slow link cuts the
    channel count (and so the bandwidth) just as silently.

    *How it is detected*: same-host pairs via ``SHM/...`` (or ``P2P`` with the env forcing it off), with the
    reason read from the log: ``NCCL_P2P_DISABLE``/``NCCL_P2P_LEVEL`` env lines, ``Could not enable P2P``
    lines (the GPUs' path is too long, e.g. across CPU sockets), NVLink in the topology dump (``NVL[bw]``)
    or the graph search (``type NVL/...``); P2P pairs whose graph search settled on a PCIe/CPU path (``type
    PHB/...``) while the topology lists NVLink. The channel count is compared with what the graph search found
    for the same topology (``Pattern ..., nChannels N``, which NCCL then doubles): below ``min_channel_share_pct``
    of that, a setting or a declared link cut them.
    """

    id = "NET004"
    verdict_order = 3
    name = "network.intra-node-path"
    summary = "Intra-node pairs on SHM/PCIe where NVLink exists, P2P disabled, or too few channels"
    advice = ("Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, check `nvidia-smi topo -m` for NVLink, and drop a "
              "NCCL_TOPO_FILE or NCCL_MAX_NCHANNELS that understates the links.")
    thresholds = {"min_channel_share_pct": Threshold(50, "%", "channels used as a share of the graph search's, "
                                                     "below which it reports", minimum=1, maximum=100)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        pairs = intra_pairs(log)
        shm = [p for p in pairs if p.transports and all(t.startswith("SHM") for t in p.transports)]
        nvlink = bool(log.topo_links.get("NVL")) or any((g.type or "").startswith("NVL") and (g.nchannels or 0) > 0
                                                           for g in log.graphs)
        p2p_off = env_is(log, "NCCL_P2P_DISABLE", "1") or env_is(log, "NCCL_P2P_LEVEL", "LOC", "0")
        findings: list[Finding] = []
        if shm:
            evidence: list[Evidence] = []
            causes: list[str] = []
            for name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"):
                ev = env_evidence(log, name)
                if ev is not None and p2p_off:
                    evidence.append(ev)
                    causes.append(f"P2P is disabled by {name}={log.env_value(name)}")
            if log.p2p_refused:
                host, a, b, _n = log.p2p_refused[0]
                causes.append(f"NCCL could not enable P2P between the GPUs (dev {a} and dev {b} on {host}: their "
                              "path is too long, e.g. across CPU sockets)")
            if nvlink:
                causes.append("NVLink joins these GPUs (NVL in the topology), so P2P over NVLink was possible")
            for p in shm[:3]:
                c = first_connection(log, p)
                if c is not None:
                    evidence.append(line_evidence(c.line, c.text, rank=p.src, name=c.transport))
            severity = "warning" if (p2p_off or nvlink) else "info"
            message = (f"{fmt.count(len(shm))} intra-node pair(s) ({pair_text(shm)}) copy through host shared memory (SHM) "
                       f"instead of GPU peer-to-peer: {'; '.join(causes) or 'the log prints no reason'}.")
            findings.append(self.finding("Intra-node traffic through host memory (SHM)", message, evidence,
                                         severity=severity, total=len(shm),
                                         facts=NetShmFacts(pairs=len(shm), p2p_disabled=p2p_off, nvlink=nvlink)))
        elif p2p_off and pairs:
            ev = env_evidence(log, "NCCL_P2P_DISABLE") or env_evidence(log, "NCCL_P2P_LEVEL")
            findings.append(self.finding("P2P disabled by the environment", "NCCL_P2P_DISABLE/NCCL_P2P_LEVEL turn "
                                         "GPU peer-to-peer off for this job.", [ev] if ev else [], severity="warning"))
        # P2P over PCIe although NVLink joins the GPUs: the graph search settled on a PCIe/CPU path.
        p2p = [p for p in pairs if p.transports and all(t.startswith("P2P") for t in p.transports)]
        found = [g for g in log.graphs if (g.nchannels or 0) > 0 and g.type]
        if p2p and log.topo_links.get("NVL") and found and not any((g.type or "").startswith("NVL") for g in found):
            g = found[0]
            findings.append(self.finding(
                "Intra-node P2P over PCIe where NVLink exists",
                f"{fmt.count(len(p2p))} intra-node pair(s) ({pair_text(p2p)}) use P2P over a {(g.type or '').split('/')[0]} path while "
                f"the topology lists NVLink (NVL[{log.topo_links['NVL'].get('max_bw')}]): a topology file or "
                "NCCL_P2P_LEVEL kept NCCL off NVLink.",
                [line_evidence(g.line, f"nChannels {g.nchannels}", name="graph search", type=g.type, derived=True)],
                severity="warning", facts=NetPcieFacts(pairs=len(p2p), path=g.type)))
        # Channels far below what the graph search found.
        nch = log.nchannels()
        searched = [g for g in log.graphs if g.nchannels]
        if nch and searched and pairs:
            best = max(searched, key=lambda g: g.nchannels or 0)
            expected = 2 * (best.nchannels or 0)  # NCCL doubles the rings its search finds (up to its maximum)
            if expected and nch * 100 < params["min_channel_share_pct"] * expected:
                findings.append(self.finding(
                    "Fewer channels than the topology gives",
                    f"The communicator runs {fmt.count(nch)} channels, while NCCL's graph search found "
                    f"{fmt.count(best.nchannels)} per ring on {best.type} links (about {fmt.count(expected)} channels): a topology file, an env limit or a "
                    "slow declared link cuts the bandwidth.",
                    [line_evidence(best.line, f"Pattern {best.pattern}, nChannels {best.nchannels}, type {best.type}",
                                   derived=True)],
                    severity="warning", facts=NetChannelsFacts(channels=nch, expected=expected)))
        return findings
