"""Ranks grouped by host: the late node (COMM005) and each collective's time split into the wait for the
last rank and the transfer after it, per rank and per host.

Both read the run's collective instances as COMM002 matches them (kernel name and occurrence in each
process, on the run's time base, complete and inside every participant's window; see
``analysis.diagnosis.rules.nsys.comm.Stragglers``): per instance, every participant's arrival (its kernel's start)
and end. Ranks on different hosts are compared on their hosts' clocks (``CLOCK_SOURCE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.nsys.common import fmt_ms, pct
from analysis.report_types import CollectiveSplit, HostSplit, LaunchDelay, RankSplit
from analysis.results import LateNodeExtra

CLOCK_SOURCE = ("each report's session start in UTC as its host's system clock read it; hosts' clocks agree "
                "only as well as NTP or PTP keeps them (the exports record no measure of it)")


def _in_window(bounds: tuple[int, int] | None) -> str:
    if bounds is None:
        return "TRUE"
    lo, hi = (int(v) for v in bounds)
    return f"(start_ns < {hi} AND (start_ns >= {lo} OR end_ns > {lo}))"


def instances(con: Any, sources: list[str], offsets: list[int],
              windows: list[tuple[int, int] | None], launch: bool = False,
              launch_end: bool = False) -> dict[str, np.ndarray]:
    """Every complete in-window instance's arrivals: columns ``part, pid, inst, name, t, e`` (``t``, ``e``: the
    kernel's start and end on the run's time base, less the earliest start of the run, so int64 holds them),
    and with ``launch`` (sources with a ``launch_ns`` column) ``l``, the host's launch on the same base, and
    ``has_l``; with ``launch_end`` (sources with ``launch_end_ns`` and ``launch_off_cpu_ns``) ``le``, the launch
    call's end, and ``lo``, how long its thread was switched out inside it (``has_le``, ``has_lo``)."""
    parts = " UNION ALL ".join(
        f"SELECT {i} AS part, pid, name, start_ns::HUGEINT + {int(off)} AS t, "  # noqa: S608 - ints, server-made sources
        f"{f'launch_ns::HUGEINT + {int(off)}' if launch else 'NULL::HUGEINT'} AS l, "
        f"{f'launch_end_ns::HUGEINT + {int(off)}' if launch_end else 'NULL::HUGEINT'} AS le, "
        f"{'launch_off_cpu_ns' if launch_end else 'NULL::BIGINT'} AS lo, "
        f"end_ns::HUGEINT + {int(off)} AS e, {_in_window(w)} AS inw "
        f"FROM {src} WHERE category = 'nccl' AND start_ns IS NOT NULL AND end_ns IS NOT NULL"
        for i, (src, off, w) in enumerate(zip(sources, offsets, windows, strict=True)))
    rel = con.sql(f"""
        WITH p AS ({parts}),
        i AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY part, pid, name ORDER BY t) AS k FROM p),
        n AS (SELECT COUNT(*) AS n FROM (SELECT DISTINCT part, pid FROM p)),
        c AS (SELECT name, k, DENSE_RANK() OVER (ORDER BY MIN(t), name, k) AS inst FROM i GROUP BY name, k
              HAVING COUNT(*) = (SELECT n FROM n) AND BOOL_AND(inw)),
        m AS (SELECT MIN(t) AS t0 FROM i)
        SELECT part, pid, inst, name, (i.t - m.t0)::BIGINT AS t, (i.e - m.t0)::BIGINT AS e, m.t0::BIGINT AS t0,
               COALESCE(i.l - m.t0, 0)::BIGINT AS l, i.l IS NOT NULL AS has_l,
               COALESCE(i.le - m.t0, i.l - m.t0, 0)::BIGINT AS le, i.le IS NOT NULL AS has_le,
               COALESCE(i.lo, 0)::BIGINT AS lo, i.lo IS NOT NULL AS has_lo
        FROM i JOIN c USING (name, k), m ORDER BY inst, part, pid""")  # noqa: S608 - see above
    return {k: np.asarray(v) for k, v in rel.fetchnumpy().items()}


def _matrix(cols: dict[str, np.ndarray]) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Participants (part, pid) and the instance x participant arrival and end matrices."""
    keys = sorted({(int(a), int(b)) for a, b in zip(cols["part"], cols["pid"], strict=True)})
    index = {k: j for j, k in enumerate(keys)}
    n_inst = int(cols["inst"].max()) if len(cols["inst"]) else 0
    t = np.zeros((n_inst, len(keys)), dtype=np.int64)
    e = np.zeros_like(t)
    col = np.array([index[(int(a), int(b))] for a, b in zip(cols["part"], cols["pid"], strict=True)], dtype=np.int64)
    row = cols["inst"].astype(np.int64) - 1
    t[row, col] = cols["t"]
    e[row, col] = cols["e"]
    return keys, t, e


def late_node(cols: dict[str, np.ndarray], ranks: list[int | None], hosts: list[str | None],
              offsets: list[int], params: Mapping[str, float], rule_id: str,
              spans: list[int] | None = None) -> list[Finding]:
    """COMM005 over ``instances``' columns; ``ranks``/``hosts``/``offsets``/``spans`` (GPU-active span, the
    share's denominator as COMM002's): per participant report."""
    keys, t, _ = _matrix(cols)
    host_of = [hosts[p] for p, _ in keys]
    names = sorted({h for h in host_of if h is not None})
    if len(names) < 2 or not len(t) or any(h is None for h in host_of):
        return []
    min_skew = int(params["min_skew_us"] * 1000)
    uncertainty = int(params["clock_uncertainty_us"] * 1000)
    out = []
    for h in names:
        mine = np.array([x == h for x in host_of])
        if mine.sum() < 2:
            continue  # a host of one rank: that rank is COMM002's straggler, not a node
        gap = t[:, mine].min(axis=1) - t[:, ~mine].max(axis=1)  # after the last rank of every other host
        late = gap >= min_skew
        if late.sum() * 100 < params["min_late_pct"] * len(t):
            continue
        behind = t[late][:, mine] - t[late][:, ~mine].max(axis=1, keepdims=True)
        per = np.median(behind, axis=0)
        lo, hi = int(per.min()), int(per.max())
        impact = int(gap[late].sum())
        median_gap = int(np.median(gap[late]))
        others = sorted({x for x in host_of if x != h and x is not None})
        after, last_of = ((f"host {others[0]}'s", f"host {others[0]}") if len(others) == 1
                          else (f"the other {fmt.count(len(others))} hosts'", f"the other {fmt.count(len(others))} hosts"))
        mine_ranks = [(ranks[keys[j][0]], keys[j]) for j in np.flatnonzero(mine)]
        below = median_gap < uncertainty
        clock = (f" Ranks on different hosts are compared on their hosts' clocks ({CLOCK_SOURCE}); taking "
                 f"{fmt_ms(uncertainty)} as their uncertainty, "
                 + ("this skew is below it: it may be the clocks, not the node." if below
                    else "this skew is above it."))
        first = np.flatnonzero(late)[:20]
        t0 = int(cols["t0"][0])
        ev = tuple(Evidence(start_ns=int(t[i, j]) + t0 - offsets[keys[j][0]],
                            rank=ranks[keys[j][0]], pid=keys[j][1], value_ns=int(gap[i]),
                            detail={"instance": int(i), "host": h})
                   for i in first for j in [int(np.flatnonzero(mine)[np.argmin(t[i, mine])])])
        out.append(Finding(
            rule_id=rule_id,
            title=(f"Late node: the {fmt.count(int(mine.sum()))} ranks of host {h} arrive {fmt_ms(lo)}-{fmt_ms(hi)} after "
                   f"{after}"),
            message=(f"In {fmt.count(int(late.sum()))} of {fmt.count(len(t))} matched collectives every rank of host {h} arrived at least "
                     f"{fmt.exact(params['min_skew_us'])} us after the last rank of {last_of}; the whole node's lateness summed to {fmt_ms(impact)} "
                     f"(median {fmt_ms(median_gap)} per collective), every other rank waiting that long." + clock),
            impact_ns=impact, impact_pct=pct(impact, max((spans[keys[j][0]] for j in np.flatnonzero(mine)),
                                                          default=0)) if spans else None,
            severity="info" if below else "",
            advice=(f"Look at what host {h} does before the collectives: its data loading and input pipeline, CPU "
                    "and memory pressure, other jobs on the node, its NICs and their NUMA placement; if the "
                    "ranks on it are slow alike, the cause is shared by the node, not one GPU."),
            evidence=ev, evidence_total=int(late.sum()), report=None, rank=None,
            extra=LateNodeExtra(
                host=h, late_in=int(late.sum()), matched_collectives=len(t),
                lateness_ns={"min": lo, "max": hi, "median_gap": median_gap},
                per_rank=[{"rank": r, "host": h, "impact_ns": int(v)} for (r, _), v in zip(mine_ranks, per, strict=True)],
                clock={"source": CLOCK_SOURCE, "uncertainty_ns": uncertainty, "below_uncertainty": below})))
    return out


def collective_split(cols: dict[str, np.ndarray], ranks: list[int | None],
                     hosts: list[str | None]) -> CollectiveSplit | None:
    """Per rank and per host, the time its collectives spent waiting for the last rank to arrive (last
    arrival minus its own) and transferring after it (its end minus the last arrival), summed over the
    matched instances; and the run's total of each (the transfer part is what the network and the
    algorithm cost once everyone is there)."""
    keys, t, e = _matrix(cols)
    if len(t) == 0 or len(keys) < 2:
        return None
    last = t.max(axis=1, keepdims=True)
    wait = np.minimum(last - t, np.maximum(e - t, 0)).sum(axis=0)  # at most its own kernel's time
    transfer = np.maximum(e - last, 0).sum(axis=0)
    per_rank = [RankSplit(rank=ranks[p], host=hosts[p], pid=pid, wait_ns=int(w), transfer_ns=int(x),
                          wait_pct=round(pct(int(w), int(w + x)) or 0.0, 3))
                for (p, pid), w, x in zip(keys, wait, transfer, strict=True)]
    out_launch: LaunchDelay | None = None
    if "has_l" in cols and len(cols["has_l"]) and bool(np.all(cols["has_l"])):
        # The host side: how long after the first rank's host each rank's host launched the collective, and
        # how long its kernel then queued on the GPU before it started.
        launch = _matrix({**cols, "t": cols["l"]})[1]
        delay = launch - launch.min(axis=1, keepdims=True)
        queue = t - launch
        for r, d, q in zip(per_rank, delay.sum(axis=0), queue.sum(axis=0), strict=True):
            r["launch_delay_ns"], r["gpu_queue_ns"] = int(d), int(q)
        i, j = np.unravel_index(int(np.argmax(delay)), delay.shape)
        p = keys[int(j)][0]
        out_launch = LaunchDelay(instance=int(i), rank=ranks[p], host=hosts[p], delay_ns=int(delay[i, j]),
                                 gpu_queue_ns=int(queue[i, j]))
        if "has_le" in cols and bool(np.all(cols["has_le"])):
            # From the launch call's start to the kernel's: inside the call (the host's time, some of it with
            # the thread switched out) and after it (the GPU's queue, when the kernel started after the call).
            end = _matrix({**cols, "t": cols["le"]})[1]
            in_call = np.minimum(end, t) - launch
            out_launch["in_launch_call_ns"] = int(in_call[i, j])
            out_launch["queued_after_call_ns"] = int(max(int(t[i, j] - end[i, j]), 0))
            if "has_lo" in cols and bool(np.all(cols["has_lo"])):
                off = _matrix({**cols, "t": cols["lo"]})[1]
                out_launch["descheduled_in_call_ns"] = int(off[i, j])
    by_host: dict[str | None, HostSplit] = {}
    for r in per_rank:
        h = by_host.setdefault(r["host"], HostSplit(host=r["host"], ranks=0, wait_ns=0, transfer_ns=0))
        h["ranks"] += 1
        h["wait_ns"] += r["wait_ns"]
        h["transfer_ns"] += r["transfer_ns"]
    return {"instances": len(t), "wait_ns": int(wait.sum()), "transfer_ns": int(transfer.sum()),
            "longest_launch_delay": out_launch,
            "per_rank": per_rank, "per_host": [v for _, v in sorted(by_host.items(), key=lambda kv: str(kv[0]))]}


class HostSteps(TypedDict):
    """One host's share of the steps its ranks finished last (``steps_by_host``)."""

    host: str | None
    ranks: int
    steps_last: int


def steps_by_host(steps: Mapping[str, Any], ranks_hosts: list[tuple[int | None, str, str | None]]) -> list[HostSteps]:
    """The per-step "finished last" counts (``run_facts.last_per_step``) summed by host; ``ranks_hosts``:
    each nsys report's (rank, label, host). A host whose ranks finish last most often is the node that holds
    the steps back."""
    host_of = {}
    for rank, label, host in ranks_hosts:
        host_of[f"rank {rank}" if rank is not None else label] = host
        host_of[label] = host
    out: dict[Any, HostSteps] = {}
    for name, n in steps.get("last", {}).items():
        h = host_of.get(name)
        row = out.setdefault(h, {"host": h, "ranks": 0, "steps_last": 0})
        row["ranks"] += 1
        row["steps_last"] += int(n)
    return sorted(out.values(), key=lambda r: (-r["steps_last"], str(r["host"])))
