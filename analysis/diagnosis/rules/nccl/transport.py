"""NET001 and NET002: what carries the traffic between nodes (sockets or RDMA, with or without GPUDirect)."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.nccl.common import (
    NetRule,
    env_evidence,
    env_is,
    first_connection,
    inter_pairs,
    line_evidence,
    pair_text,
    rdma_nics,
)
from analysis.readers.nccl.model import NcclLog
from analysis.results import NetGdrFacts, NetSocketsFacts


class SocketBetweenNodes(NetRule):
    """Inter-node traffic over TCP sockets.

    *Why it matters*: ``NET/Socket`` moves every byte through the kernel's TCP stack and host memory; an
    InfiniBand/RoCE/EFA path (``NET/IB``, ``NET/IBext``, ``NET/AWS Libfabric``) is several times faster and
    frees the CPU. NCCL falls back to sockets silently when it finds no RDMA device (a container without
    ``/dev/infiniband``, no ``libibverbs``, a missing net plugin) or when told to (``NCCL_IB_DISABLE=1``,
    ``NCCL_NET=Socket``).

    *How it is detected*: rank pairs on different hosts whose connections are ``via NET/Socket``; the cause
    is read from the same log: RDMA NICs listed by ``NET/IB : Using`` (a fallback despite them), ``NET/IB :
    No device found`` or ``Failed to open libibverbs`` (none visible), or the env lines that set it.
    """

    id = "NET001"
    verdict_order = 1
    name = "network.socket-between-nodes"
    summary = "Inter-node traffic runs over TCP sockets instead of RDMA"
    advice = ("Give the job the RDMA devices (in containers: /dev/infiniband and the verbs libraries, or the "
              "provider's net plugin such as aws-ofi-nccl), check `ibv_devinfo`, and unset NCCL_IB_DISABLE / "
              "NCCL_NET=Socket unless sockets are meant.")
    thresholds = {"min_pairs": Threshold(1, "count", "inter-node pairs over sockets before it reports",
                                         minimum=1, maximum=1e6)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        pairs = [p for p in inter_pairs(log) if p.transports and all(t.startswith("NET/Socket") for t in p.transports)]
        if len(pairs) < params["min_pairs"]:
            return []
        evidence: list[Evidence] = []
        for p in pairs[:5]:
            c = first_connection(log, p)
            if c is not None:
                evidence.append(line_evidence(c.line, c.text, rank=p.src, name=c.transport))
        on_purpose = env_is(log, "NCCL_IB_DISABLE", "1") or env_is(log, "NCCL_NET", "socket")
        nics = rdma_nics(log)
        no_device = [n for n in log.net_notes if n.kind == "no_device"]
        no_verbs = [w for w in log.warnings if w.kind == "no_ibverbs"]
        if on_purpose:
            for name in ("NCCL_IB_DISABLE", "NCCL_NET"):
                ev = env_evidence(log, name)
                if ev is not None:
                    evidence.insert(0, ev)
            cause = "set on purpose by the environment (NCCL_IB_DISABLE / NCCL_NET)"
            severity = "warning"
        elif nics:
            cause = f"although RDMA NICs are listed ({', '.join(nics[:6])}): NCCL could not use them"
            severity = "critical"
        elif no_device or no_verbs:
            for n in no_device[:2]:
                evidence.insert(0, line_evidence(n.line, n.text, name="no RDMA device"))
            for w in no_verbs[:1]:
                evidence.insert(0, line_evidence(w.line, w.message, rank=w.rank, name="libibverbs"))
            cause = "because NCCL found no RDMA device (no IB/RoCE device or verbs library visible to the job)"
            severity = "critical"
        else:
            cause = "and the log names no RDMA device"
            severity = "critical"
        nodes = sorted({h for h in log.rank_hosts().values()})
        message = (f"{fmt.count(len(pairs))} inter-node rank pair(s) ({pair_text(pairs)}) across {fmt.count(len(nodes))} nodes run over "
                   f"TCP sockets, {cause}.")
        return [self.finding("Inter-node traffic over sockets", message, evidence, severity=severity,
                             total=len(pairs),
                             facts=NetSocketsFacts(pairs=len(pairs), on_purpose=on_purpose, rdma_nics=nics))]


class GdrOff(NetRule):
    """GPUDirect RDMA off on inter-node pairs.

    *Why it matters*: without GPUDirect RDMA the NIC cannot read or write GPU memory: every message is
    staged through a host bounce buffer (an extra copy and PCIe crossing each way), which caps bandwidth and
    adds latency on every inter-node transfer.

    *How it is detected*: inter-node connections over an RDMA network whose transport lacks ``/GDRDMA``;
    the reason is NCCL's own per-GPU line (``GPU Direct RDMA Disabled for GPU X / HCA Y (distance D > L)``:
    the GPU-NIC path is longer than ``NCCL_NET_GDR_LEVEL`` allows), else the HCA line (``(no module)``: the
    nvidia-peermem / nv_peer_mem kernel module, or dma-buf support, is missing).
    """

    id = "NET002"
    verdict_order = 2
    name = "network.gdr-off"
    summary = "Inter-node RDMA pairs run without GPUDirect RDMA"
    advice = ("Load nvidia-peermem (or use a driver/kernel with dma-buf), keep each GPU on a NIC behind the same "
              "PCIe switch, and raise NCCL_NET_GDR_LEVEL only where the path can take it.")
    thresholds = {"min_pairs": Threshold(1, "count", "inter-node RDMA pairs without GDR before it reports",
                                         minimum=1, maximum=1e6)}

    def check_log(self, log: NcclLog, params: Mapping[str, float]) -> list[Finding]:
        pairs = [p for p in inter_pairs(log) if p.gdr is False
                 and not any(t.startswith("NET/Socket") for t in p.transports)]
        if len(pairs) < params["min_pairs"]:
            return []
        evidence: list[Evidence] = []
        gpu_lines = [g for g in log.gdr if g.scope == "gpu" and not g.enabled]
        hca_lines = [g for g in log.gdr if g.scope == "hca" and not g.enabled]
        reasons: list[str] = []
        level_env = log.env_value("NCCL_NET_GDR_LEVEL")
        level_text = f"NCCL_NET_GDR_LEVEL={level_env}" if level_env else "NCCL_NET_GDR_LEVEL default"
        for g in gpu_lines[:3]:
            evidence.append(line_evidence(g.line, g.text, name=f"GPU {g.gpu} / HCA {g.hca}", host=g.host))
            if g.distance is not None and g.level is not None:
                reasons.append(f"the GPU-NIC distance {g.distance} is above the GDR level {g.level} ({level_text})")
            elif g.reason:
                reasons.append(_reason(g.reason))
        for g in hca_lines[:2]:
            evidence.append(line_evidence(g.line, g.text, name=f"HCA {g.hca_name or g.hca}", host=g.host))
            if g.reason:
                reasons.append(_reason(g.reason))
        for p in pairs[:3]:
            c = first_connection(log, p)
            if c is not None:
                evidence.append(line_evidence(c.line, c.text, rank=p.src, name=c.transport))
        reason = "; ".join(dict.fromkeys(reasons)) if reasons else "the log prints no reason (no GDR line)"
        peak = log.tests.peak_busbw
        cost = (f" nccl-tests measured a peak busbw of {fmt.exact(peak)} GB/s over this path."
                if peak is not None else "")
        message = (f"{fmt.count(len(pairs))} inter-node pair(s) ({pair_text(pairs)}) move data without GPUDirect RDMA, staged "
                   f"through host memory: {reason}.{cost}")
        return [self.finding("GPUDirect RDMA off between nodes", message, evidence, severity="warning",
                             total=len(pairs),
                             facts=NetGdrFacts(pairs=len(pairs), reasons=list(dict.fromkeys(reasons))))]


def _reason(text: str) -> str:
    low = text.lower()
    if "no module" in low:
        return "the GPUDirect kernel module (nvidia-peermem / nv_peer_mem) is not loaded" + (
            " or the GPU does not support it" if "not supported" in low else "")
    return text
