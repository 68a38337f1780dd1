"""The run page's network path: what the run's NCCL debug log says NCCL built (the analysis' ``network_path``,
kept in the run's summary), as a node x node and a rank x rank view of transports (intra- vs inter-node,
each NIC a rail colour, GPUDirect RDMA, PXN proxies), the NICs per node, settings, warnings and failures.

Every string here is the log's (hostnames, NIC names, warnings): the template escapes them (Jinja autoescape);
nothing here builds markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.services.reads.summaries import StoredRun

MAX_MATRIX_RANKS = 64  # the rank x rank view is drawn up to this many ranks; beyond, node x node only
RAILS = 8  # rail colours; NIC indexes beyond wrap around
SHOWN = 20  # warnings, settings and rows of lists shown before "and N more"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _short(transport: str) -> str:
    """The transport's family for a cell: ``NET/IB``, ``NET/Socket``, ``P2P/IPC``, ``SHM`` ..."""
    parts = transport.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "/".join(parts[:2])
    if parts[0] == "P2P" and len(parts) > 1:
        return "/".join(parts[:2])
    return parts[0]


def _cell(pair: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if pair is None:
        return None
    transports = [str(t) for t in pair.get("transports") or []]
    nics = [n for n in (_int(x) for x in pair.get("nics") or []) if n is not None]
    return {"transports": transports, "short": ", ".join(dict.fromkeys(_short(t) for t in transports)),
            "inter": pair.get("inter_node"), "gdr": pair.get("gdr"), "nics": nics,
            "rail": (nics[0] % RAILS) if nics else None,
            "proxy": [p for p in (_int(x) for x in pair.get("proxy_ranks") or []) if p is not None],
            "channels": len(pair.get("channels") or []), "shared": bool(pair.get("shared"))}


def nccl_path_section(run: StoredRun) -> dict[str, Any] | None:
    """The section's data from the run's summary; None when the run has no NCCL log."""
    path = run.network_path
    if not isinstance(path, Mapping):
        return None
    host_of: dict[int, str | None] = {}
    for r in path.get("ranks") or []:
        if isinstance(r, Mapping) and (n := _int(r.get("rank"))) is not None:
            host_of.setdefault(n, None if r.get("host") is None else str(r["host"]))
    pairs: dict[tuple[int, int], Mapping[str, Any]] = {}
    for p in path.get("pairs") or []:
        if isinstance(p, Mapping) and _int(p.get("src")) is not None and _int(p.get("dst")) is not None:
            pairs[(p["src"], p["dst"])] = p
    ranks = sorted(set(host_of) | {s for s, _ in pairs} | {d for _, d in pairs})
    rows: list[dict[str, Any]] = [{"rank": s, "host": host_of.get(s), "cells": [_cell(pairs.get((s, d))) for d in ranks]}
            for s in ranks] if len(ranks) <= MAX_MATRIX_RANKS else []
    nodes = [str(n.get("host")) for n in path.get("nodes") or [] if isinstance(n, Mapping) and n.get("host")]
    node_cells: dict[tuple[str, str], dict[str, Any]] = {}
    for (s, d), p in pairs.items():
        a, b = host_of.get(s), host_of.get(d)
        if a is None or b is None:
            continue
        c = node_cells.setdefault((a, b), {"transports": {}, "pairs": 0, "gdr": set()})
        c["pairs"] += 1
        for t in p.get("transports") or []:
            c["transports"][_short(str(t))] = None
        if p.get("gdr") is not None:
            c["gdr"].add(bool(p["gdr"]))
    node_rows = [{"host": a, "cells": [None if (a, b) not in node_cells else {
        "short": ", ".join(node_cells[(a, b)]["transports"]), "pairs": node_cells[(a, b)]["pairs"],
        "inter": a != b, "gdr": (all(node_cells[(a, b)]["gdr"]) if node_cells[(a, b)]["gdr"] else None)}
        for b in nodes]} for a in nodes]
    nics = [n for n in path.get("nics") or [] if isinstance(n, Mapping)]
    gdr = [g for g in path.get("gdr") or [] if isinstance(g, Mapping) and g.get("scope") == "gpu"]
    warnings = [w for w in path.get("warnings") or [] if isinstance(w, Mapping)]
    failures = [f for f in path.get("failures") or [] if isinstance(f, Mapping)]
    env = [e for e in path.get("env") or [] if isinstance(e, Mapping)]
    tests = path.get("nccl_tests") if isinstance(path.get("nccl_tests"), Mapping) else {}
    inter: list[dict[str, Any]] = [c for row in rows for c in row["cells"] if c and c["inter"]]
    return {
        "report": path.get("report"), "version": path.get("version"), "nodes": nodes, "ranks": ranks,
        "rows": rows, "too_many_ranks": len(ranks) > MAX_MATRIX_RANKS, "node_rows": node_rows,
        "networks": dict(path.get("networks") or {}), "nics": nics[:SHOWN * 4], "gdr": gdr[:SHOWN * 4],
        "env": env[:SHOWN * 2], "warnings": warnings[:SHOWN], "warnings_total": len(warnings),
        "warning_counts": dict(path.get("warning_counts") or {}), "failures": failures[:SHOWN],
        "first_warning": warnings[0] if warnings else None, "net_notes": list(path.get("net_notes") or [])[:SHOWN],
        "nchannels": path.get("nchannels"), "rings": list(path.get("rings") or [])[:4],
        "tests": tests, "joined": list(path.get("joined") or []),
        "not_joined": [x for x in path.get("not_joined") or [] if isinstance(x, Mapping)][:SHOWN],
        "links": [k for k in path.get("links") or [] if isinstance(k, Mapping)][:SHOWN * 10],
        "links_join": path.get("links_join") if isinstance(path.get("links_join"), Mapping) else None,
        "files": [f for f in path.get("files") or [] if isinstance(f, Mapping)][:SHOWN * 5],
        "files_total": len(path.get("files") or []),
        "left_out": [x for x in path.get("left_out") or [] if isinstance(x, Mapping)][:SHOWN],
        "traffic": path.get("inter_node_traffic") if isinstance(path.get("inter_node_traffic"), Mapping) else None,
        "inter_transports": sorted({c["short"] for c in inter}),
        "inter_gdr": None if not inter or all(c["gdr"] is None for c in inter) else all(c["gdr"] for c in inter
                                                                                        if c["gdr"] is not None),
    }


__all__ = ["MAX_MATRIX_RANKS", "nccl_path_section"]
