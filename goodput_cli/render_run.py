"""The text report's run-wide parts: a rolled-up finding's ranks, and NCCL's network matrix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analysis import fmt

PER_RANK_SHOWN = 8


def per_rank_line(f: dict[str, Any], ms: Callable[[Any], str]) -> list[str]:
    """``per rank: rank 3 (host) 12.3 ms, ...`` for a finding rolled up across ranks."""
    rows = f.get("per_rank") or []
    if not rows:
        return []
    shown = ", ".join(f"{'rank ' + str(r['rank']) if r.get('rank') is not None else r.get('report')}"
                      f"{' (' + str(r['host']) + ')' if r.get('host') else ''} {ms(r['impact_ns'])}"
                      for r in rows[:PER_RANK_SHOWN])
    more = f", and {fmt.count(len(rows) - PER_RANK_SHOWN)} more" if len(rows) > PER_RANK_SHOWN else ""
    return [f"     per rank: {shown}{more}"]


def warning_lines(result: dict[str, Any]) -> list[str]:
    """A run of several reports: what is missing or does not belong (``analysis.run.mixed``), before its numbers."""
    return [f"WARNING ({w['code']}): {w['message']}" for w in result.get("run_warnings") or []]


def _rate(bps: float | None) -> str:
    return "n/a" if bps is None else fmt.rate(bps)


def network_lines(result: dict[str, Any], human_bytes: Callable[[Any], str], ms: Callable[[Any], str]) -> list[str]:
    """The run's rank x rank network matrix (NCCL's ncclNet* ranges), one line per link, then per node. Bytes
    count each posted transfer once; retried posts and the time they waited for the peer are said apart."""
    net = result.get("network")
    if not net:
        return []
    lines = [f"== network (NCCL's ncclNet* ranges): {fmt.count(len(net['links']))} link(s), inter-node "
             f"{human_bytes(net['inter_node_bytes'])}, intra-node {human_bytes(net['intra_node_bytes'])}"]
    for r in net["links"]:
        where = {True: "inter-node", False: "intra-node", None: "hosts unknown"}[r["inter_node"]]
        lines.append(f"   rank {r['sender']} -> rank {r['receiver']} ({where}): {human_bytes(r['bytes'])} in "
                     f"{fmt.count(r['transfers'])} sends on {fmt.count(r['channels'])} channel(s), {_rate(r['bandwidth_bps'])} over "
                     f"{ms(r['in_flight_ns'])} in flight")
        if r.get("retries"):
            who = f" for rank {r['waiting_for']} to post its receives" if r.get("waiting_for") is not None else ""
            lines.append(f"     posted after {fmt.count(r['attempts'])} attempts ({fmt.count(r['retries'])} retries): waited "
                         f"{ms(r.get('waiting_ns'))}{who} (waiting, not transfer: left out of the bandwidth)")
    s = net.get("slowest")
    if s:
        lines.append(f"   slowest link: rank {s['sender']} ({s['sender_host']}) -> rank {s['receiver']} "
                     f"({s['receiver_host']}), {_rate(s['bandwidth_bps'])}")
    for w in net.get("waited_for") or []:
        lines.append(f"   waited for: rank {w['rank']} ({w.get('host') or '?'}), {ms(w['waiting_ns'])} by rank(s) "
                     f"{', '.join(map(str, w['by']))} before they could post to it")
    nodes = net.get("nodes") or []
    if len(nodes) > 1:
        for n in nodes:
            lines.append(f"   node {n['host'] or '?'} (rank(s) {', '.join(map(str, n['ranks'])) or '-'}): within "
                         f"{human_bytes(n['intra_bytes'])}, to other nodes {human_bytes(n['sent_inter_bytes'])}, "
                         f"from other nodes {human_bytes(n['received_inter_bytes'])}")
    if net.get("without_ranges"):
        lines.append(f"   no network ranges recorded on rank(s) {', '.join(map(str, net['without_ranges']))}")
    lines.append("")
    return lines


def _rank_waiting(p: dict[str, Any], ms: Callable[[Any], str]) -> str:
    """One rank's line of a waiting/transfer split (an MPI ``per_rank`` entry or a collectives ``participants``
    one, ``analysis.run.mpi`` and ``analysis.run.waiting``): its waiting, for whom, and its transfer."""
    whom = ", ".join(f"{k} {ms(v)}" for k, v in (p.get("waited_for") or {}).items()) or "nobody"
    return f"   {p['rank']} ({p.get('host') or '?'}): waiting {ms(p['wait_ns'])} (for {whom}), transfer {ms(p['transfer_ns'])}"


def mpi_lines(m: dict[str, Any] | None, ms: Callable[[Any], str]) -> list[str]:
    """MPI calls across ranks: each rank's waiting for another rank apart from the transfer, per collective
    who arrived last, and the calls left out with why (``analysis.run.mpi``)."""
    if not m:
        return []
    lines = [f"== MPI across ranks: {fmt.count(m['matched'])} message(s) and {fmt.count(m.get('instances') or 0)} collective instance(s) "
             "matched" + (f" ({m['matching']})" if m.get("matching") else "")]
    if m.get("reason"):
        lines.append(f"   point-to-point not matched: {m['reason']}")
    for d in m.get("directions") or []:
        if d.get("reason"):
            lines.append(f"   {d['sender']} -> {d['receiver']} not matched: {d['reason']}")
    for c in m.get("collectives") or []:
        if c.get("reason"):
            lines.append(f"   {c['call']} not matched: {c['reason']}")
        else:
            last = ", ".join(f"{k} x{fmt.count(v)}" for k, v in (c.get("last_arrivals") or {}).items())
            lines.append(f"   {c['call']}: {fmt.count(c['instances'])} instance(s) across {', '.join(c['ranks'])}; last to arrive: "
                         f"{last}")
    for p in m.get("per_rank") or []:
        lines.append(f"{_rank_waiting(p, ms)} of {ms(p['time_ns'])} in {fmt.count(p['calls'])} call(s)")
    for w in (m.get("longest_waits") or [])[:3]:
        lines.append(f"   longest wait: {w['rank']} in {w['call']} #{w['occurrence']} waited {ms(w['wait_ns'])} for "
                     f"{w['waited_for']}, transfer {ms(w['transfer_ns'])}")
    for x in m.get("left_out") or []:
        lines.append(f"   left out: {x['rank']} {x['call']} x{fmt.count(x['calls'])}: {x['reason']}")
    crit = m.get("critical")
    if crit:
        lines.append(f"   critical path: {crit['rank']} ({crit.get('host') or '?'}): the other ranks wait "
                     f"{ms(crit['others_wait_ns'])} for it ({fmt.share(crit['share_of_mpi_time_pct'])} of the MPI calls' "
                     "time), waiting for its work, not communication")
    lines.append("")
    return lines


def collectives_lines(result: dict[str, Any], ms: Callable[[Any], str]) -> list[str]:
    """Multi-rank: the collectives' time split into the wait for the last rank and the transfer after it,
    per host, and the longest host-side launch delay."""
    c = result.get("collectives")
    if not c:
        return []
    lines = mpi_lines(c.get("mpi"), ms)
    un = c.get("point_to_point_unmatched")
    if un:
        lines += [f"== send/recv kernels not split ({', '.join(un['kernels'])}, {fmt.count(un['instances'])} instance(s)): "
                  f"{un['reason']}", ""]
    if not c.get("per_rank"):
        return lines
    lines += [f"== collectives across ranks: {fmt.count(c['instances'])} matched; waiting for the last rank {ms(c['wait_ns'])}, "
             f"transferring after it {ms(c['transfer_ns'])} (summed over ranks)"]
    for h in c["per_host"]:
        lines.append(f"   host {h['host'] or '?'} ({fmt.count(h['ranks'])} rank(s)): wait {ms(h['wait_ns'])}, "
                     f"transfer {ms(h['transfer_ns'])}")
    late = c.get("longest_launch_delay")
    if late and late["delay_ns"] > 0:
        if late.get("in_launch_call_ns") is not None:  # where the time to the kernel's start went
            off = late.get("descheduled_in_call_ns")
            then = (f"its kernel started {ms(late['gpu_queue_ns'])} after the launch call began: "
                    f"{ms(late['in_launch_call_ns'])} inside the call"
                    + (f" ({ms(off)} of it with the thread switched out)" if off else "")
                    + f", {ms(late['queued_after_call_ns'])} queued on the GPU after it")
        else:
            then = f"its kernel then queued {ms(late['gpu_queue_ns'])} on the GPU"
        lines.append(f"   longest host launch delay: rank {late['rank']} ({late['host'] or '?'}) launched collective "
                     f"#{late['instance']} {ms(late['delay_ns'])} after the first rank's host; {then}")
    for kind, k in (c.get("by_kind") or {}).items():
        if len(c.get("by_kind") or {}) > 1 or kind == "point-to-point":
            lines.append(f"   {kind}: {fmt.count(k['instances'])} instance(s), waiting {ms(k['wait_ns'])} (for the "
                         f"{'peer' if kind == 'point-to-point' else 'last rank'}), transfer {ms(k['transfer_ns'])}")
    for p in c.get("participants") or []:
        lines.append(_rank_waiting(p, ms))
    crit = c.get("critical")
    if crit:
        lines.append(f"   critical path: {crit['rank']} ({crit.get('host') or '?'}) arrives last at "
                     f"{fmt.count(crit['instances_last'])} of {fmt.count(crit['instances'])} collective(s); the others wait "
                     f"{ms(crit['others_wait_ns'])} for it ({fmt.share(crit['share_of_collective_time_pct'])} of the "
                     f"collectives' time)")
    lines.append("")
    return lines
