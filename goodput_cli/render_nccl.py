"""Plain-text network path of a run's NCCL debug log (the result's ``network_path``): nodes, transports
intra- and inter-node, NICs, GPUDirect RDMA, settings, warnings and failures, a few lines each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analysis import fmt

SHOWN = 6  # items of each list printed before "and N more"


def _more(items: list[Any], shown: int = SHOWN) -> str:
    return f" (and {fmt.count(len(items) - shown)} more)" if len(items) > shown else ""


def _at(item: dict[str, Any]) -> str:
    """``line 12``, or ``rank3.log line 12`` in a path merged from several logs."""
    return f"{item['file']} line {item.get('line')}" if item.get("file") else f"line {item.get('line')}"


def path_lines(result: dict[str, Any], clip: Callable[..., str]) -> list[str]:
    """The section's lines; none when the run has no NCCL log. ``clip`` makes log text printable and short."""
    path = result.get("network_path")
    if not isinstance(path, dict):
        return []
    nodes = [n for n in path.get("nodes") or [] if isinstance(n, dict)]
    ranks = path.get("ranks") or []
    version = f"NCCL {path['version']}, " if path.get("version") else ""
    lines = [clip(f"== network path ({version}{path.get('report') or 'NCCL log'}): {fmt.count(len(nodes))} node(s), "
                  f"{fmt.count(len(ranks))} rank(s)" + (f", {fmt.count(path['nchannels'])} channels" if path.get("nchannels") else ""), 200)]
    files = [f for f in path.get("files") or [] if isinstance(f, dict)]
    if len(files) > 1:
        lines.append("   " + clip(f"merged from {fmt.count(len(files))} logs of one job: "
                                  + ", ".join(str(f.get("file")) for f in files[:SHOWN]) + _more(files), 200))
    for x in (path.get("left_out") or [])[:SHOWN]:
        lines.append("   " + clip(f"left out: {x.get('file')}: {x.get('reason')}", 200))
    nics_by_host: dict[str, list[str]] = {}
    for n in path.get("nics") or []:
        speed = f" {fmt.si(n['speed_mbps'] * 1e6, 'b/s')}" if n.get("speed_mbps") else ""
        nics_by_host.setdefault(str(n.get("host") or "?"), []).append(f"[{n.get('index')}]{n.get('name')} {n.get('kind')}{speed}")
    for n in nodes[:SHOWN]:
        nic = nics_by_host.get(str(n.get("host")), [])
        lines.append("   " + clip(f"node {n.get('host')}: ranks {', '.join(map(str, n.get('ranks') or []))}"
                          + (f"; NICs {' '.join(nic[:4])}{_more(nic, 4)}" if nic else ""), 160))
    if len(nodes) > SHOWN:
        lines.append(f"   (and {fmt.count(len(nodes) - SHOWN)} more nodes)")
    for inter, name in ((False, "intra-node"), (True, "inter-node")):
        groups: dict[str, list[str]] = {}
        for p in path.get("pairs") or []:
            if p.get("inter_node") is not inter:
                continue
            key = ", ".join(dict.fromkeys(str(t) for t in p.get("transports") or []))
            if p.get("gdr") is not None:
                key += " GDR on" if p["gdr"] else " GDR off"
            if p.get("proxy_ranks"):
                key += f" PXN via {','.join(map(str, p['proxy_ranks']))}"
            groups.setdefault(key, []).append(f"{p.get('src')}->{p.get('dst')}")
        for key, pairs in groups.items():
            lines.append("   " + clip(f"{name}: {key}: {' '.join(pairs[:SHOWN])}{_more(pairs)}", 160))
    gdr = [g for g in path.get("gdr") or [] if g.get("scope") == "gpu"]
    if gdr:
        off = [g for g in gdr if not g.get("enabled")]
        lines.append("   " + clip(f"GPUDirect RDMA: {fmt.count(len(gdr) - len(off))} of {fmt.count(len(gdr))} GPU/NIC pairs enabled"
                          + (f"; off: {off[0].get('reason') or 'no reason printed'}" if off else ""), 160))
    env = [e for e in path.get("env") or [] if e.get("set_by") == "environment"]
    if env:
        lines.append("   " + clip("set by the user: " + " ".join(f"{e.get('name')}={e.get('value')}" for e in env[:SHOWN])
                          + _more(env), 160))
    warnings = path.get("warnings") or []
    if warnings:
        w = warnings[0]
        who = (f" rank {w['rank']}" if w.get("rank") is not None else "") + (f" on {w['host']}" if w.get("host") else "")
        lines.append("   " + clip(f"first warning (of {fmt.count(len(warnings))}),{who} {_at(w)}: {w.get('message')}", 160))
    for f in (path.get("failures") or [])[:3]:
        lines.append("   " + clip(f"failure, {_at(f)}: {f.get('kind')}: {f.get('text')}", 160))
    tests = path.get("nccl_tests") or {}
    if tests.get("peak_busbw") is not None:
        lines.append(f"   nccl-tests: peak bus bandwidth {fmt.rate(tests['peak_busbw'] * 1e9)}"
                     + (f" at {fmt.size(tests['peak_size'])}" if tests.get("peak_size") else "")
                     + (f", average {fmt.rate(tests['avg_busbw'] * 1e9)}" if tests.get("avg_busbw") is not None else ""))
    for j in path.get("joined") or []:
        lines.append("   " + clip(f"joined: {j.get('report')} ({j.get('host') or '?'}) holds NCCL rank(s) "
                          f"{', '.join(map(str, j.get('nccl_ranks') or []))} (matched by {j.get('by')})", 160))
    for x in path.get("not_joined") or []:
        lines.append("   " + clip(f"not joined: {x.get('report')}: {x.get('reason')}", 200))
    join = path.get("links_join")
    if isinstance(join, dict) and not join.get("joined"):
        lines.append("   " + clip(f"achieved bandwidth per link: not joined ({join.get('reason')})", 200))
    elif isinstance(join, dict) and join.get("by"):
        lines.append("   " + clip(f"achieved bandwidth per link: the exports' ranks checked against the log's by "
                                  f"{join['by']}" + (f" ({join['by_reason']})" if join.get("by_reason") else ""), 200))
    for k in [k for k in path.get("links") or [] if isinstance(k, dict)][:SHOWN * 2]:
        bw = k.get("bandwidth_bps")
        speed = f" of a {fmt.si(k['nic_speed_mbps'] * 1e6, 'b/s')} NIC" if k.get("nic_speed_mbps") else ""
        carried = ", ".join(map(str, k["transports"])) if k.get("transports") else "no connection line in the log"
        lines.append("   " + clip(f"link {k.get('sender')}->{k.get('receiver')} ({k.get('sender_host')} -> "
                                  f"{k.get('receiver_host')}): {carried}: "
                                  + (f"{fmt.si(bw * 8, 'b/s')} achieved{speed}" if bw else "no timed transfer")
                                  + f" over {fmt.size(k.get('bytes') or 0)}", 200))
    traffic = path.get("inter_node_traffic")
    if isinstance(traffic, dict):
        rdma = "" if traffic.get("gdr") is None else f", GPUDirect RDMA {'on' if traffic['gdr'] else 'off'}"
        lines.append("   " + clip(f"across nodes: {' and '.join(map(str, traffic.get('collectives') or []))} over "
                                  f"{', '.join(map(str, traffic.get('transports') or []))}{rdma}", 160))
    lines.append("")
    return lines


__all__ = ["path_lines"]
