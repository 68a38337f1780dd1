"""The run page's network path: what the run's NCCL debug log says NCCL built (the analysis' ``network_path``,
kept in the run's summary), as a node x node and a rank x rank view of transports (intra- vs inter-node,
each NIC a rail colour, GPUDirect RDMA, PXN proxies), the NICs per node, settings, warnings and failures.

Every string here is the log's (hostnames, NIC names, warnings): the template escapes them (Jinja autoescape);
nothing here builds markup.
"""

from __future__ import annotations

from typing import Any

from analysis.api import Pair, RunNetworkPath
from app.services.reads.summaries import StoredRun

MAX_MATRIX_RANKS = 64  # the rank x rank view is drawn up to this many ranks; beyond, node x node only
RAILS = 8  # rail colours; NIC indexes beyond wrap around
SHOWN = 20  # warnings, settings and rows of lists shown before "and N more"


def _short(transport: str) -> str:
    """The transport's family for a cell: ``NET/IB``, ``NET/Socket``, ``P2P/IPC``, ``SHM`` ..."""
    parts = transport.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "/".join(parts[:2])
    if parts[0] == "P2P" and len(parts) > 1:
        return "/".join(parts[:2])
    return parts[0]


def _cell(pair: Pair | None) -> dict[str, Any] | None:
    if pair is None:
        return None
    nics = list(pair.nics)
    return {"transports": list(pair.transports), "short": ", ".join(dict.fromkeys(_short(t) for t in pair.transports)),
            "inter": pair.inter_node, "gdr": pair.gdr, "nics": nics, "rail": (nics[0] % RAILS) if nics else None,
            "proxy": list(pair.proxy_ranks), "channels": len(pair.channels), "shared": pair.shared}


def nccl_path_section(run: StoredRun) -> dict[str, Any] | None:
    """The section's data from the run's summary; None when the run has no NCCL log."""
    if run.network_path is None:
        return None
    run_path: RunNetworkPath = run.network_path
    path = run_path.path
    host_of: dict[int, str | None] = {}
    for r in path.ranks:
        host_of.setdefault(r.rank, r.host)
    pairs = {(p.src, p.dst): p for p in path.pairs}
    ranks = sorted(set(host_of) | {s for s, _ in pairs} | {d for _, d in pairs})
    rows: list[dict[str, Any]] = [{"rank": s, "host": host_of.get(s), "cells": [_cell(pairs.get((s, d))) for d in ranks]}
            for s in ranks] if len(ranks) <= MAX_MATRIX_RANKS else []
    nodes = [n.host for n in path.nodes if n.host]
    node_cells: dict[tuple[str, str], dict[str, Any]] = {}
    for (s, d), p in pairs.items():
        a, b = host_of.get(s), host_of.get(d)
        if a is None or b is None:
            continue
        c = node_cells.setdefault((a, b), {"transports": {}, "pairs": 0, "gdr": set()})
        c["pairs"] += 1
        for t in p.transports:
            c["transports"][_short(t)] = None
        if p.gdr is not None:
            c["gdr"].add(p.gdr)
    node_rows = [{"host": a, "cells": [None if (a, b) not in node_cells else {
        "short": ", ".join(node_cells[(a, b)]["transports"]), "pairs": node_cells[(a, b)]["pairs"],
        "inter": a != b, "gdr": (all(node_cells[(a, b)]["gdr"]) if node_cells[(a, b)]["gdr"] else None)}
        for b in nodes]} for a in nodes]
    gdr = [g for g in path.gdr if g.scope == "gpu"]
    warnings = path.warnings
    files = path.files or ()
    inter: list[dict[str, Any]] = [c for row in rows for c in row["cells"] if c and c["inter"]]
    return {
        "report": run_path.report, "version": path.version, "nodes": nodes, "ranks": ranks,
        "rows": rows, "too_many_ranks": len(ranks) > MAX_MATRIX_RANKS, "node_rows": node_rows,
        "networks": dict(path.networks), "nics": path.nics[:SHOWN * 4], "gdr": gdr[:SHOWN * 4],
        "env": path.env[:SHOWN * 2], "warnings": warnings[:SHOWN], "warnings_total": len(warnings),
        "warning_counts": dict(path.warning_counts), "failures": path.failures[:SHOWN],
        "first_warning": warnings[0] if warnings else None, "net_notes": path.net_notes[:SHOWN],
        "nchannels": path.nchannels, "rings": path.rings[:4],
        "tests": path.nccl_tests, "joined": list(run_path.joined or ()),
        "not_joined": list(run_path.not_joined or ())[:SHOWN],
        "links": list(run_path.links or ())[:SHOWN * 10],
        "links_join": run_path.links_join,
        "files": files[:SHOWN * 5], "files_total": len(files),
        "left_out": list(path.left_out or ())[:SHOWN],
        "traffic": run_path.inter_node_traffic,
        "inter_transports": sorted({c["short"] for c in inter}),
        "inter_gdr": None if not inter or all(c["gdr"] is None for c in inter) else all(c["gdr"] for c in inter
                                                                                        if c["gdr"] is not None),
    }


__all__ = ["MAX_MATRIX_RANKS", "nccl_path_section"]
