"""The run page's communication matrix: NCCL's network transfers rank x rank (the analysis' ``network``
object, kept in the run's summary), as a heat-map of bytes with each link's achieved bandwidth."""

from __future__ import annotations

from typing import Any

from analysis.api import link_status
from app.services.reads.summaries import StoredRun


def network_section(run: StoredRun) -> dict[str, Any] | None:
    """Rows of the heat-map (sender x receiver), the slowest link and the intra/inter-node split; None
    when no report of the run records NCCL's network ranges."""
    net = run.network
    if not net or not net.get("links"):
        return None
    links = {(link["sender"], link["receiver"]): link for link in net["links"]}
    top = max((link["bytes"] for link in net["links"]), default=0)
    ranks = list(net.get("ranks") or [])
    hosts = net.get("hosts") or {}
    without = set(net.get("without_ranges") or [])
    recorded = {r for r in ranks if r not in without}
    # ranks ordered by node, so each node's block of the matrix is contiguous
    ranks = sorted(ranks, key=lambda r: (str(hosts.get(str(r))), r))
    rows = [{"rank": s, "host": hosts.get(str(s)),
             "cells": [{"link": links.get((s, r)), "heat": (links[(s, r)]["bytes"] / top) if (s, r) in links and top else 0,
                        "status": link_status(s, r, set(links), recorded),
                        "inter": hosts.get(str(s)) != hosts.get(str(r))}
                       for r in ranks]}
            for s in ranks]
    return {"nodes": net.get("nodes") or [], "node_links": net.get("node_links") or [],
            "waited_for": net.get("waited_for") or [],
            "ranks": ranks, "hosts": hosts, "rows": rows, "slowest": net.get("slowest"),
            "inter_node_bytes": net.get("inter_node_bytes"), "intra_node_bytes": net.get("intra_node_bytes"),
            "without_ranges": net.get("without_ranges") or [], "senders_across_nodes": net.get("senders_across_nodes") or []}


def collectives_section(run: StoredRun) -> dict[str, Any] | None:
    """The collectives' time split (wait for the last rank vs transfer after it) per host and per rank, and
    the longest host-side launch delay; None for a run of one rank or without matched collectives."""
    c = run.collectives
    if not c or not c.get("per_rank"):
        return None
    return {"instances": c["instances"], "wait_ns": c["wait_ns"], "transfer_ns": c["transfer_ns"],
            "per_host": c.get("per_host") or [], "per_rank": c["per_rank"], "launch": c.get("longest_launch_delay"),
            "critical": c.get("critical"), "participants": c.get("participants") or [], "clock": c.get("clock"),
            "by_kind": c.get("by_kind") or {}}


def mpi_section(run: StoredRun) -> dict[str, Any] | None:
    """Blocking MPI sends and receives between two ranks, each rank's waiting for its peer apart from the
    transfer (``collectives.mpi``, ``analysis.run.mpi``); None when the run has none."""
    m = (run.collectives or {}).get("mpi")
    return m if isinstance(m, dict) else None
