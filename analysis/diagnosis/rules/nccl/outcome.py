"""NET005 to NET007: what the user forced, why the job failed, and what bandwidth it reached."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.nccl.common import (
    RDMA_NETS,
    NetRule,
    env_line,
    inter_pairs,
    intra_pairs,
    line_evidence,
)
from analysis.readers.nccl.model import NcclLog, Warn
from analysis.results import NetBandwidthFacts, NetFailureFacts, NetSettingsFacts

# Settings that change NCCL's choices (diagnostic ones, like NCCL_DEBUG or the dump files, are left out).
FORCING = {
    "NCCL_ALGO": "algorithm", "NCCL_PROTO": "protocol", "NCCL_MIN_NCHANNELS": "channel count",
    "NCCL_MAX_NCHANNELS": "channel count", "NCCL_MIN_CTAS": "channel count", "NCCL_MAX_CTAS": "channel count",
    "NCCL_NTHREADS": "threads", "NCCL_BUFFSIZE": "buffer size", "NCCL_P2P_NET_CHUNKSIZE": "chunk size",
    "NCCL_NVLS_CHUNKSIZE": "chunk size", "NCCL_NVLSTREE_MAX_CHUNKSIZE": "chunk size",
    "NCCL_P2P_NVL_CHUNKSIZE": "chunk size", "NCCL_P2P_PCI_CHUNKSIZE": "chunk size",
    "NCCL_TOPO_FILE": "topology", "NCCL_GRAPH_FILE": "topology", "NCCL_NET_GDR_LEVEL": "GPUDirect",
    "NCCL_NET_GDR_READ": "GPUDirect", "NCCL_P2P_LEVEL": "P2P", "NCCL_P2P_DISABLE": "P2P",
    "NCCL_SHM_DISABLE": "SHM", "NCCL_IB_DISABLE": "network", "NCCL_NET": "network", "NCCL_IB_HCA": "network",
    "NCCL_CROSS_NIC": "rails", "NCCL_PXN_DISABLE": "rails", "NCCL_NVLS_ENABLE": "NVLS",
    "NCCL_COLLNET_ENABLE": "CollNet", "NCCL_NET_FORCE_FLUSH": "network", "NCCL_SOCKET_IFNAME": "network",
    "NCCL_IB_GID_INDEX": "network", "NCCL_IB_TIMEOUT": "network", "NCCL_IB_RETRY_CNT": "network",
}

# What the first WARN of a failure means, by kind.
MEANINGS = {
    "mr_registration": ("registering GPU memory with the NIC failed: GPUDirect RDMA is unusable there (in a "
                        "container: the GPU/NIC memory-registration path, peermem or dma-buf, is not available)"),
    "ibv_create_cq": "the NIC or its driver could not be set up (ibv_create_cq: completion queue creation failed)",
    "ibv_modify_qp": "the NIC or its driver could not be set up (ibv_modify_qp: queue pair state change failed)",
    "ibv_create_qp": "the NIC or its driver could not be set up (ibv_create_qp failed)",
    "wc_error": "a work completion came back with an error on this link",
    "no_route": ("the out-of-band (bootstrap) socket cannot reach the root's address: the OOB interface "
                 "(NCCL_SOCKET_IFNAME) is wrong or not routed between the nodes"),
    "connection_refused": "the bootstrap peer refused the connection (the other rank is gone or not listening)",
    "connection_closed": "a peer closed its connection (the consequence of a failure on that peer)",
    "timeout": "an operation timed out",
    "oom": "memory ran out",
    "cuda_error": "a CUDA call failed",
    "invalid_usage": "NCCL was called incorrectly",
}
CONSEQUENCES = {"connection_closed", "connection_refused"}
# A finding's title per root-cause kind.
TITLES = {
    "mr_registration": "GPU memory registration on the NIC failed",
    "ibv_create_cq": "NIC set-up failed (ibv_create_cq)",
    "ibv_modify_qp": "NIC set-up failed (ibv_modify_qp)",
    "ibv_create_qp": "NIC set-up failed (ibv_create_qp)",
    "wc_error": "a network link returned a completion error",
    "no_route": "the bootstrap network cannot reach the root rank",
    "connection_refused": "a peer refused the bootstrap connection",
    "connection_closed": "a peer closed its connection",
    "timeout": "an NCCL operation timed out",
    "oom": "out of memory",
    "cuda_error": "a CUDA call failed",
    "invalid_usage": "NCCL was called incorrectly",
}
WC_STATUS = {12: "IBV_WC_RETRY_EXC_ERR: retries exhausted, the remote NIC never acknowledged (a link, cable, port "
                 "or peer down)", 13: "IBV_WC_RNR_RETRY_EXC_ERR: receiver not ready, retries exhausted",
             5: "IBV_WC_WR_FLUSH_ERR: the queue pair was already in error", 4: "IBV_WC_LOC_PROT_ERR: local "
             "protection error (memory registration)", 10: "IBV_WC_REM_ACCESS_ERR: remote access error"}


class ForcedSettings(NetRule):
    """Settings forced by the environment or the net plugin.

    *Why it matters*: ``NCCL_ALGO``, ``NCCL_PROTO``, channel counts, buffer sizes, a topology file or GDR
    levels override NCCL's tuning for every message size; set once for a benchmark they often stay in job
    scripts and cost bandwidth later. Knowing what was forced is the first step of any NCCL tuning.

    *How it is detected*: ``NCCL_* set by environment to ...`` lines and the net plugin's ``Setting NCCL_*``
    lines, for the settings that change NCCL's choices (``NCCL_DEBUG`` and dump files are left out).
    """

    id = "NET005"
    verdict_order = 6
    name = "network.forced-settings"
    summary = "Algorithm, protocol, channels, buffers or topology forced by env or plugin"
    advice = "Keep only the settings you still need; rerun without the others and compare busbw."
    thresholds = {"min_settings": Threshold(1, "count", "forced settings before it reports", minimum=1, maximum=1e4)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        forced = [e for e in log.env if e.name in FORCING]
        if len(forced) < params["min_settings"]:
            return []
        evidence = [env_line(e) for e in forced]
        listing = ", ".join(f"{e.name}={e.value if e.value is not None else '?'}"
                            + (" (net plugin)" if e.set_by != "environment" else "") for e in forced)
        return [self.finding("Settings forced by the user", f"{fmt.count(len(forced))} NCCL setting(s) were set for this job: "
                             f"{listing}.", evidence, severity="info", total=len(forced),
                             facts=NetSettingsFacts(settings={e.name: e.value for e in forced}))]


class FailureRootCause(NetRule):
    """A failed job reduced to its root cause: the first NCCL WARN on the rank that failed, and its meaning.

    *Why it matters*: a failing NCCL job prints a cascade: every peer reports the connection the failing rank
    dropped, the framework wraps it in ``unhandled system error``. Only the first WARN, on one rank, names the
    cause: NIC memory registration, NIC set-up, the out-of-band network, a link that stopped answering.

    *How it is detected*: the job failed (a WARN of a failure kind, or a framework/launcher error line); the
    first failure WARN that is not itself a consequence (``Connection closed by remote peer``) is the root;
    its rank comes from the launcher label or the init lines, its NIC from that rank's network connections
    (or the WARN's own device number), and the later WARNs on other ranks are the peers that saw it.
    """

    id = "NET006"
    verdict_order = 0
    name = "network.failure-root-cause"
    summary = "The first NCCL WARN on the failing rank and what it means"
    advice = ("Fix the root cause named (NIC/driver set-up, GPU memory registration, OOB interface, the link) "
              "before the consequences reported by the other ranks.")
    thresholds = {"max_peers_listed": Threshold(16, "count", "peer ranks listed in the message", minimum=1,
                                                maximum=1e4)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        failing = [w for w in log.warnings if w.kind in MEANINGS]
        if not failing and not log.failures:
            return []
        roots = [w for w in failing if w.kind not in CONSEQUENCES] or failing
        if not roots:
            f = log.failures[0]
            return [self.finding("The job failed", f"The job failed ({f.kind}) with no NCCL WARN explaining it.",
                                 [line_evidence(f.line, f.text, rank=f.label)], severity="critical")]
        root = roots[0]
        meaning = MEANINGS.get(root.kind, root.kind)
        if root.kind == "wc_error":
            code = _int_after(root.message, "error ")
            if code in WC_STATUS:
                meaning += f" ({WC_STATUS[code]})"
        nic = self._nic(log, root)
        same = [w for w in roots if w.kind == root.kind]
        ranks = sorted({w.rank for w in same if w.rank is not None})
        peers = sorted({w.rank for w in failing if w.kind in CONSEQUENCES and w.rank is not None} - set(ranks))
        limit = int(params["max_peers_listed"])
        who = f"rank {root.rank}" if root.rank is not None else f"{root.host or 'an unknown host'}"
        if len(ranks) > 1:
            who = f"ranks {ranks[:limit]}"
        message = (f"{who[0].upper()}{who[1:]} logged `{root.message[:200]}` first ({log.line_ref(root.line)}"
                   f"{', host ' + root.host if root.host else ''}{', NIC ' + nic if nic else ''}): {meaning}.")
        if len(same) > 1:
            message += f" {fmt.count(log.warning_counts.get(root.kind, len(same)))} such WARN line(s) in all."
        if peers:
            message += f" Ranks {peers[:limit]} then saw the consequence (their peer's connection closed)."
        if log.failures:
            message += f" The job ended with: {log.failures[-1].text[:160]}"
        evidence: list[Evidence] = [line_evidence(root.line, root.message, rank=root.rank, name=root.kind,
                                                  host=root.host, source=root.source, nic=nic)]
        evidence += [line_evidence(w.line, w.message, rank=w.rank, name=w.kind, host=w.host)
                     for w in failing if w is not root][:8]
        evidence += [line_evidence(f.line, f.text, rank=f.label, name=f.kind) for f in log.failures[:4]]
        return [self.finding(f"Failure root cause: {TITLES.get(root.kind, root.kind)}", message, evidence,
                             severity="critical", rank=root.rank, total=len(failing) + len(log.failures),
                             facts=NetFailureFacts(root_kind=root.kind, root_line=root.line, root_rank=root.rank,
                                                   nic=nic, failing_ranks=ranks, peers=peers))]

    @staticmethod
    def _nic(log: NcclLog, w: Warn) -> str | None:
        return log.nic_of_warning(w)


def _int_after(text: str, marker: str) -> int | None:
    at = text.find(marker)
    if at < 0:
        return None
    digits = ""
    for ch in text[at + len(marker):at + len(marker) + 9]:
        if ch not in "0123456789":
            break
        digits += ch
    return int(digits) if digits else None


# The slowest port of each RDMA class in service (GB/s per direction): a floor, used when no speed is printed.
RDMA_FLOOR_GBS = {"IB": 1.25, "RoCE": 1.25, "EFA": 12.5, "CXI": 12.5}


class MeasuredBandwidth(NetRule):
    """nccl-tests' peak bus bandwidth against the link it crossed.

    *Why it matters*: busbw is what the slowest link of the collective carried; far below that link's speed,
    something between NCCL and the wire is wrong (sockets, no GPUDirect, a shared or slow NIC, PCIe instead
    of NVLink), or the sizes tested never reach the plateau.

    *How it is detected*: the peak busbw of the result table against, between nodes, the NIC speed when NCCL
    prints it (``speed=`` in Mb/s, times the NICs one GPU drives) or else the floor of its class (10 Gb/s for
    IB/RoCE: a busbw below the slowest RDMA port is not an RDMA path at work); inside a node, the NVLink
    bandwidth of the topology dump (``NVL[bw]``, GB/s).
    """

    id = "NET007"
    verdict_order = 5
    name = "network.measured-bandwidth"
    summary = "nccl-tests peak busbw far below the link it crossed"
    advice = ("Compare with the NIC/NVLink speed: fix the transport findings first, and test sizes up to the "
              "plateau (-e 8G or more).")
    thresholds = {"min_link_share_pct": Threshold(50, "%", "peak busbw as a share of a printed link speed, below "
                                                  "which it reports", minimum=1, maximum=100)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        bw = log.tests
        peak = max((v for v in (bw.peak_busbw, bw.peak_busbw_in_place) if v is not None), default=None)
        if peak is None:
            return []
        inter = [p for p in inter_pairs(log) if not any(t.startswith("NET/Socket") for t in p.transports)]
        link, what, printed = None, None, False
        if inter:
            used = sorted({n for p in inter for n in p.nics})
            speeds = [n.speed_mbps for n in log.nics if n.index in used and n.speed_mbps]
            if speeds:
                link, what, printed = min(speeds) / 8000.0, f"the NIC speed printed ({fmt.exact(min(speeds))} Mb/s)", True
            else:
                kinds = {n.kind for n in log.nics if n.index in used} or {
                    k.upper() for k in log.providers()} or {"IB" for net in log.networks if net in RDMA_NETS}
                floors = [RDMA_FLOOR_GBS[k] for k in kinds if k in RDMA_FLOOR_GBS]
                if floors:
                    link, what = min(floors), f"the slowest {'/'.join(sorted(kinds))} port in service"
        elif intra_pairs(log) and (nvl_bw := log.topo_links["NVL"]["max_bw"] if "NVL" in log.topo_links else None):
            link = float(nvl_bw)
            what, printed = f"the NVLink bandwidth in the topology (NVL[{fmt.exact(link)}])", True
        if link is None:
            return []
        limit = link * (params["min_link_share_pct"] / 100.0 if printed else 1.0)
        if peak >= limit:
            return []
        evidence = [line_evidence(bw.peak_line, f"peak busbw {fmt.exact(peak)} GB/s (nccl-tests row of {fmt.exact(bw.peak_size)} B)",
                                  name="nccl-tests", derived=True)]
        if bw.avg_line:
            evidence.append(line_evidence(bw.avg_line, f"Avg bus bandwidth : {bw.avg_busbw}", derived=True))
        message = (f"nccl-tests peaked at {fmt.exact(peak)} GB/s busbw, {fmt.share(100 * peak / link)} of {what}, about "
                   f"{fmt.exact(link)} GB/s.")
        return [self.finding("Bandwidth far below the link", message, evidence, severity="warning",
                             facts=NetBandwidthFacts(peak_busbw=peak, link_gbs=link, link_printed=printed))]
