"""Each collective instance split, per rank, into waiting and transfer, naming whom it waited for; and the
run's critical path: the rank the others wait for.

On the run's aligned clock (each report's session start; across hosts only as good as their clocks agree,
``analysis.diagnosis.rules.nsys.run_nodes.CLOCK_SOURCE``), a collective instance (the same NCCL kernel name
and occurrence in every participating process, as COMM002 matches them) starts on each rank when that rank
arrives. No rank can finish before the last one has arrived, so for each rank:

- ``wait_ns`` = last arrival - its own arrival: time it spent waiting for the last peer (``waited_for``),
  not communication cost;
- ``transfer_ns`` = its end - the last arrival: what the collective cost once everyone was there.

Summed per rank, the waiting attributed to each late rank (``waited_on``) says whose work everyone waits for:
the ``critical`` rank, the run's critical path, where a speed-up shortens everyone's step.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Finding
from analysis.diagnosis.rules.base import split_in_run
from analysis.diagnosis.rules.nsys.common import fmt_ms
from analysis.diagnosis.rules.nsys.run_nodes import CLOCK_SOURCE
from analysis.diagnosis.rules.registry import default_registry
from analysis.model.kernel_names import short_kernel_name
from analysis.report_types import (
    CollectiveSplit,
    CollectiveWaits,
    CriticalRank,
    KindSplit,
    MpiSplit,
    SampleSums,
    UnmatchedPairs,
    WaitedOn,
    WaitItem,
    WaitSamples,
)
from analysis.results import CommOverlapExtra, HostCommExtra, Verdict
from analysis.run.mpi import intersect as mpi_intersect
from analysis.run.mpi import union as mpi_union

ITEMS = 50  # instances listed in full (the first ones on the clock); the totals use all of them
LONGEST = 10  # and the instances with the most waiting
# The critical path leads the run's verdict when the waiting on one rank is at least this share of the
# collectives' time (waiting + transfer) across ranks: below it the ranks arrive together.
CRITICAL_SHARE = 0.10
ONE_OFF_KINDS = ("startup", "teardown", "no_gpu_data")


SAMPLES = 10_000  # per-instance samples kept for comparisons (the first ones on the clock)


def step_samples(wait: np.ndarray, transfer: np.ndarray, arrival: np.ndarray,
                 steps: list[tuple[int, int]]) -> SampleSums:
    """Per step, the waiting and the transfer (summed over ranks) of the instances that arrive inside it:
    ``wait``/``transfer`` per instance, ``arrival`` the reference rank's arrival of each instance, ``steps``
    ``[start, end)`` on the same clock. A step with no instance counts 0, as a kernel's time per step does
    (``analysis.views.compare_samples.kernel_per_step``)."""
    if not steps:
        return {"wait_ns": [], "transfer_ns": []}
    lo = np.asarray([a for a, _ in steps], dtype=np.int64)
    hi = np.asarray([b for _, b in steps], dtype=np.int64)
    at = np.searchsorted(lo, arrival, side="right") - 1  # the last step starting at or before the arrival
    inside = (at >= 0) & (arrival < hi[np.clip(at, 0, None)])
    w = np.zeros(len(steps), dtype=np.int64)
    x = np.zeros(len(steps), dtype=np.int64)
    np.add.at(w, at[inside], wait[inside])
    np.add.at(x, at[inside], transfer[inside])
    return {"wait_ns": [int(v) for v in w], "transfer_ns": [int(v) for v in x]}


P2P_RE = re.compile(r"(SendRecv|Send|Recv)")


def is_p2p(kernel: str) -> bool:
    """An NCCL point-to-point kernel (``ncclDevKernel_SendRecv``, ``ncclKernel_Send...``): it waits for its
    peer only, not for every rank of the run."""
    return P2P_RE.search(str(kernel).split("(")[0]) is not None


def pairs_only(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], UnmatchedPairs | None]:
    """``run_nodes.instances``' columns without the point-to-point instances when more than two processes
    take part: the exports record no peer, so a send/recv kernel is matched to its peer only when the run has
    one pair (the k-th on each side); with more, matching the k-th on every rank would make each wait for the
    last rank of the run, not for its peer. Returns the columns (instances numbered again) and what was left
    out, with why (None when nothing was)."""
    if not len(cols.get("inst", [])):
        return cols, None
    n = len({(int(a), int(b)) for a, b in zip(cols["part"], cols["pid"], strict=True)})
    p2p = np.asarray([is_p2p(str(k)) for k in cols["name"]], dtype=bool)
    if n <= 2 or not p2p.any():
        return cols, None
    left = sorted({short_kernel_name(str(k)) for k in cols["name"][p2p]})
    kept = {k: v[~p2p] for k, v in cols.items()}
    _, kept["inst"] = np.unique(kept["inst"], return_inverse=True)
    kept["inst"] = kept["inst"].astype(np.int64) + 1
    return kept, {"kernels": left, "instances": len(np.unique(cols["inst"][p2p])),
                  "reason": f"{fmt.count(n)} processes run NCCL kernels and the exports record no peer: send/recv kernels are "
                            "matched (waiting for the peer apart from transfer) only between two processes"}


def collective_waits(cols: dict[str, np.ndarray], names: list[str], hosts: list[str | None],
                     steps: tuple[int, list[tuple[int, int]]] | None = None) -> CollectiveWaits | None:
    """``cols``: ``run_nodes.instances`` (with ``name``); ``names``/``hosts``: per report part; ``steps``: a
    reference part and its complete steps in the window, ``[start, end)`` on ``cols``' clock. Returns
    ``items`` (per instance: its kernel, the last rank, per rank its arrival, wait, whom it waited for and
    transfer), ``longest_waits``, ``waited_on`` (per late rank: the waiting it caused), ``critical``,
    ``clock`` and ``samples`` (per instance and, with ``steps``, per step: waiting and transfer summed over
    ranks, what comparisons test); None without two participants."""
    if not len(cols.get("inst", [])):
        return None
    keys = sorted({(int(a), int(b)) for a, b in zip(cols["part"], cols["pid"], strict=True)})
    if len(keys) < 2:
        return None
    multi_pid = len({p for p, _ in keys}) < len(keys)
    who = [f"{names[p]} pid {pid}" if multi_pid else names[p] for p, pid in keys]
    host = [hosts[p] for p, _ in keys]
    index = {k: j for j, k in enumerate(keys)}
    n = int(cols["inst"].max())
    t = np.zeros((n, len(keys)), dtype=np.int64)
    e = np.zeros_like(t)
    kernel = [""] * n
    for part, pid, inst, name, a, b in zip(cols["part"], cols["pid"], cols["inst"], cols["name"], cols["t"], cols["e"],
                                           strict=True):
        i, j = int(inst) - 1, index[(int(part), int(pid))]
        t[i, j], e[i, j], kernel[i] = int(a), int(b), str(name)
    last = np.argmax(t, axis=1)
    t_last = t[np.arange(n), last]
    # A rank waits at most its own kernel's time (a send can finish into its peer's buffer before the peer
    # arrives; clocks of two hosts can disagree): waiting + transfer = its kernel's duration.
    wait = np.minimum(t_last[:, None] - t, np.maximum(e - t, 0))
    transfer = np.maximum(e - t_last[:, None], 0)
    caused = np.zeros(len(keys), dtype=np.int64)  # waiting of the others while this one was the last
    np.add.at(caused, last, wait.sum(axis=1))
    waited_for: list[dict[str, int]] = [defaultdict(int) for _ in keys]
    for i in range(n):
        for j in range(len(keys)):
            if wait[i, j] > 0:
                waited_for[j][who[int(last[i])]] += int(wait[i, j])

    def item(i: int) -> WaitItem:
        return {"instance": i, "kernel": kernel[i], "kind": "point-to-point" if is_p2p(kernel[i]) else "collective",
                "last": who[int(last[i])], "ranks": [
            {"rank": who[j], "host": host[j], "arrival_ns": int(t[i, j] - t[i].min()), "wait_ns": int(wait[i, j]),
             "waited_for": who[int(last[i])] if wait[i, j] > 0 else None, "transfer_ns": int(transfer[i, j])}
            for j in range(len(keys))]}

    per_wait, per_transfer = wait.sum(axis=1), transfer.sum(axis=1)
    samples: WaitSamples = {"per_instance": {"wait_ns": [int(v) for v in per_wait[:SAMPLES]],
                                             "transfer_ns": [int(v) for v in per_transfer[:SAMPLES]]},
                            "per_step": None}
    ref_cols = [j for j, (p, _) in enumerate(keys) if steps is not None and p == steps[0]]
    if steps is not None and ref_cols and steps[1]:
        arrival = t[:, ref_cols].min(axis=1)
        sums = step_samples(per_wait, per_transfer, arrival, steps[1])
        samples["per_step"] = {"reference": names[steps[0]], "steps": len(steps[1]), "wait_ns": sums["wait_ns"],
                               "transfer_ns": sums["transfer_ns"]}
    p2p = np.asarray([is_p2p(k) for k in kernel], dtype=bool)
    by_kind: dict[str, KindSplit] = {kind: {"instances": int(m.sum()), "wait_ns": int(wait[m].sum()), "transfer_ns": int(transfer[m].sum())}
               for kind, m in (("collective", ~p2p), ("point-to-point", p2p)) if m.any()}
    total = int(wait.sum() + transfer.sum())
    order = np.argsort(-wait.sum(axis=1), kind="stable")[:LONGEST]
    lasts = np.bincount(last, minlength=len(keys))
    waited_on: list[WaitedOn] = [{"rank": who[j], "host": host[j], "others_wait_ns": int(caused[j]), "instances_last": int(lasts[j])}
                 for j in np.argsort(-caused, kind="stable") if caused[j] > 0]
    crit = waited_on[0] if waited_on else None
    critical: CriticalRank | None = None
    if crit is not None and total > 0:
        critical = {**crit, "share_of_collective_time_pct": round(100.0 * crit["others_wait_ns"] / total, 3),
                    "instances": n, "leads_verdict": crit["others_wait_ns"] >= CRITICAL_SHARE * total}
    return {"participants": [{"rank": who[j], "host": host[j], "wait_ns": int(wait[:, j].sum()),
                              "transfer_ns": int(transfer[:, j].sum()),
                              "waited_for": dict(sorted(waited_for[j].items(), key=lambda kv: -kv[1]))}
                             for j in range(len(keys))],
            "items": [item(i) for i in range(min(n, ITEMS))], "items_total": n,
            "longest_waits": [item(int(i)) for i in order if wait[int(i)].sum() > 0],
            "waited_on": waited_on, "critical": critical, "samples": samples, "by_kind": by_kind,
            "clock": CLOCK_SOURCE if len({h for h in host}) > 1 else "one host's clock"}


def critical_verdict(verdict: Verdict | None, verdicts: list[Verdict], names: list[str],
                     waits: CollectiveSplit | None) -> Verdict | None:
    """The run's verdict told from the critical path: when the others wait on one rank for a material share
    of the collectives' time (``CRITICAL_SHARE``), that rank's own verdict, prefixed with who waits for it;
    else ``verdict`` unchanged. ``names``: each nsys report's name, in the order of ``verdicts``."""
    crit = waits.get("critical") if waits else None
    mpi_split = waits.get("mpi") if waits else None
    mpi = mpi_split["critical"] if mpi_split else None
    if verdict is not None and verdict.kind in ONE_OFF_KINDS:
        return verdict  # the run's bound is outside its loop: the collectives' waiting is not the story
    if verdict is None or len(verdicts) < 2:
        return verdict
    where = f" on {crit['host']}" if crit and crit.get("host") else ""
    if crit and crit.get("leads_verdict"):
        who = crit["rank"]
        lead = (f"Critical path: {crit['rank']}{where} arrives last at {crit['instances_last']} of "
                f"{fmt.count(crit['instances'])} collective(s); the other ranks wait {fmt_ms(crit['others_wait_ns'])} for it "
                f"({fmt.share(crit['share_of_collective_time_pct'])} of the collectives' time, waiting, not transfer). "
                "Its own bound: ")
    elif mpi and mpi["share_of_mpi_time_pct"] >= 100 * CRITICAL_SHARE:
        who = mpi["rank"]
        others = "the other rank waits" if len(mpi_split["per_rank"] if mpi_split else []) <= 2 else "the other ranks wait"
        lead = (f"Critical path: {mpi['rank']}{' on ' + mpi['host'] if mpi['host'] else ''}: {others} "
                f"{fmt_ms(mpi['others_wait_ns'])} inside MPI calls for it to reach the matching call "
                f"({fmt.share(mpi['share_of_mpi_time_pct'])} of the MPI calls' time, waiting for its work, not "
                "communication). Its own bound: ")
    else:
        return verdict
    rank = str(who).split(" pid ")[0]
    if rank not in names:
        return verdict
    own = verdicts[names.index(rank)]
    return replace(own, text=lead + own.text)


def mpi_apart(reports: list[tuple[str, str, list[Finding], np.ndarray | None]], mpi: MpiSplit | None,
              waiting: dict[str, tuple[int, np.ndarray, np.ndarray]]) -> None:
    """HOST003 (GPU idle while the host communicates) on each rank of a run whose MPI calls were split
    (``analysis.run.mpi``), changed in place. ``reports``: each nsys report's label, name (``rank R``), placed
    findings and GPU idle inside its MPI calls (``mpi_idle``: pid, start, end on its own clock); ``waiting``: per
    participant (``rank R`` or ``rank R pid P``) its pid and its calls' waiting for other ranks as intervals on
    its own clock. The GPU idle that passed inside that waiting is the other rank's work, not this rank's
    communication cost: HOST003's impact is reduced by it (``mpi_waiting_idle_ns``; the impact before it is
    ``impact_with_waiting_ns``) and the text says so, with the rank's waiting in its MPI calls
    (``mpi_waiting_ns``) and whom it waited for (``mpi_waited_for``)."""
    ids = split_in_run(default_registry(), "mpi_waiting")
    per = {p["rank"]: p for p in (mpi["per_rank"] if mpi else [])}
    for label, name, findings, idle in reports:
        mine = [w for w in per if w == name or w.startswith(name + " pid ")]
        wait = sum(int(per[w]["wait_ns"]) for w in mine)
        if not mine or not wait:
            continue
        whom: dict[str, int] = {}
        for w in mine:
            for k, v in per[w]["waited_for"].items():
                whom[k] = whom.get(k, 0) + int(v)
        cut = 0
        for w in mine:
            if idle is None or w not in waiting:
                continue
            pid, ws, we = waiting[w]
            rows = idle[idle[:, 0] == pid] if len(idle) else idle
            pieces = mpi_union(ws, we)
            cut += sum(int((e - s).sum()) for s, e in [mpi_intersect((rows[:, 1], rows[:, 2]), pieces)])
        time_ns = sum(int(per[w]["time_ns"]) for w in mine)
        said = ", ".join(f"{k} {fmt_ms(v)}" for k, v in sorted(whom.items(), key=lambda kv: -kv[1]))
        for i, f in enumerate(findings):
            if f.rule_id not in ids or f.report != label or not isinstance(f.extra, HostCommExtra):
                continue
            before = int(f.impact_ns)
            c = min(cut, before)
            extra = replace(f.extra, mpi_waiting_ns=wait, mpi_waited_for=dict(sorted(whom.items(), key=lambda kv: -kv[1])),
                            mpi_waiting_idle_ns=c, impact_with_waiting_ns=before)
            findings[i] = replace(
                f, impact_ns=before - c, impact_pct=_scaled_pct(f.impact_pct, before - c, before), extra=extra,
                message=f.message + (f" Of the rank's {fmt_ms(time_ns)} in MPI calls matched across ranks, {fmt_ms(wait)} "
                                     f"was waiting for another rank ({said}) to reach the matching call, not "
                                     f"communication: the {fmt_ms(c)} of GPU idle inside that waiting is that rank's "
                                     f"work and is left out of this impact ({fmt_ms(before)} with it, "
                                     f"{fmt_ms(before - c)} without)."))


def _scaled_pct(pct: float | None, now: int, before: int) -> float | None:
    """A finding's share of the run's time (as its JSON holds it: 3 places) once its impact went from ``before`` to
    ``now``."""
    return round(round(float(pct), 3) * now / before, 3) if pct is not None and before else pct


def waiting_apart(reports: list[tuple[str, int | None, str | None, list[Finding]]],
                  split: CollectiveSplit | None) -> None:
    """COMM001 (exposed communication) on each rank of a multi-rank run, told apart from the waiting the
    collectives split measured on that rank (``reports``: each nsys report's label, rank, host and placed
    findings, changed in place). Where no compute ran beside the NCCL kernels (``has_compute`` false) every
    NCCL kernel instant is exposed, so the rank's waiting (inside its NCCL kernels, from its arrival to the
    last rank's) lies wholly inside the exposed time: the finding's impact is the exposed time less that
    waiting, which is COMM002's (the late rank's) to claim. With compute beside them the waiting may be
    partly hidden: the finding only says how much of its time was waiting at most."""
    rows = (split.get("per_rank") or []) if split else []
    ids = split_in_run(default_registry(), "collective_waiting")
    for label, rank, host, findings in reports:
        mine = [r for r in rows if r.get("rank") == rank and r.get("host") == host]
        if len(mine) != 1 or rank is None:
            continue  # unmatched or ambiguous: leave the finding as it is
        wait = int(mine[0]["wait_ns"])
        for i, f in enumerate(findings):
            if f.rule_id not in ids or f.report != label or wait <= 0 or not isinstance(f.extra, CommOverlapExtra):
                continue
            whom = ", ".join((next((p["waited_for"] for p in ((split.get("participants") or []) if split else [])
                                    if p.get("rank") == f"rank {rank}"), {}) or {}).keys())
            exposed = int(f.impact_ns)
            if f.extra.has_compute is False:
                cut = min(wait, exposed)
                findings[i] = replace(
                    f, impact_ns=exposed - cut, impact_pct=_scaled_pct(f.impact_pct, exposed - cut, exposed),
                    extra=replace(f.extra, waiting_ns=cut, exposed_with_waiting_ns=exposed),
                    message=f.message + (f" Of it, {fmt_ms(cut)} was waiting for {whom or 'the last rank'} to arrive, "
                                         f"not communication: counted under the late rank (COMM002), not here; "
                                         f"{fmt_ms(exposed - cut)} remains."))
            else:
                findings[i] = replace(
                    f, extra=replace(f.extra, waiting_up_to_ns=min(wait, exposed)),
                    message=f.message + (f" Up to {fmt_ms(min(wait, exposed))} of the rank's NCCL time was waiting "
                                         f"for {whom or 'the last rank'} to arrive (the collectives split), not "
                                         "communication."))
