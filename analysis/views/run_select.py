"""What a click on the run timeline selects: the kernel under the pointer, the API call that launched it, and,
for an NCCL kernel, the same collective instance on every rank with its arrival skew.

Collective instances are matched as COMM002 matches them: by kernel name and order of occurrence within
each participating process (the communicator's issue order), on the run clock (``analysis.views.run_timeline``).
"""

from __future__ import annotations

from analysis.views.payloads import Collective, CollectiveInstance, Selection
from analysis.views.run_timeline import Part, offsets


def _kernel_at(part: Part, pid: int | None, device: int | None, stream: int | None, t: int,
               tol: int) -> tuple | None:
    """The kernel of that lane nearest to local time ``t`` (within ``tol`` ns), or None."""
    return part.trace.con.execute(
        """SELECT start_ns, end_ns, name, category, correlation_id, pid, tid, device, stream FROM kernels
            WHERE pid IS NOT DISTINCT FROM $pid AND device IS NOT DISTINCT FROM $dev
              AND stream IS NOT DISTINCT FROM $st AND end_ns >= $t - $tol AND start_ns <= $t + $tol
            ORDER BY CASE WHEN start_ns <= $t AND $t <= end_ns THEN 0 ELSE 1 END,
                     least(abs(start_ns - $t), abs(end_ns - $t)), end_ns - start_ns DESC
            LIMIT 1""",
        {"pid": pid, "dev": device, "st": stream, "t": int(t), "tol": int(tol)}).fetchone()


def _launch(part: Part, pid: int | None, correlation_id: int | None) -> tuple | None:
    if correlation_id is None or not part.trace.has_rows("cuda_api"):
        return None
    return part.trace.con.execute(
        """SELECT start_ns, end_ns, name, tid FROM cuda_api
            WHERE correlation_id = $c AND pid IS NOT DISTINCT FROM $pid ORDER BY start_ns LIMIT 1""",
        {"c": correlation_id, "pid": pid}).fetchone()


def collective(parts: list[Part], part_index: int, pid: int | None, name: str, start_local: int) -> Collective:
    """The same NCCL kernel instance (name, occurrence) in every process of the run that ran that name."""
    offs, aligned = offsets(parts)
    k = parts[part_index].trace.scalar(
        "SELECT count(*) FROM kernels WHERE pid IS NOT DISTINCT FROM $pid AND name = $n AND start_ns < $s",
        {"pid": pid, "n": name, "s": int(start_local)})
    instances: list[CollectiveInstance] = []
    for i, part in enumerate(parts):
        if not part.trace.has_rows("kernels"):
            continue
        for (p,) in part.trace.sql("SELECT DISTINCT pid FROM kernels WHERE name = $n", {"n": name}):
            row = part.trace.con.execute(
                """SELECT start_ns, end_ns, device, stream FROM kernels
                    WHERE pid IS NOT DISTINCT FROM $pid AND name = $n ORDER BY start_ns LIMIT 1 OFFSET $k""",
                {"pid": p, "n": name, "k": int(k)}).fetchone()
            if row is None:
                continue
            s, e, dev, st = row
            instances.append({"report_id": part.report_id, "pid": p, "rank": part.rank, "device": dev, "stream": st,
                              "lane_id": f"{part.report_id}:{p}:gpu:{dev}:{st}",
                              "start_ns": int(s) + offs[i], "end_ns": int(e) + offs[i]})
    first = min((x["start_ns"] for x in instances), default=0)
    for x in instances:
        x["arrival_ns"] = x["start_ns"] - first
    last = max(instances, key=lambda x: x["start_ns"], default=None)
    return {"name": name, "occurrence": int(k), "aligned": aligned, "instances": instances,
            "skew_ns": (last["start_ns"] - first) if last else 0,
            "last": None if last is None else {"report_id": last["report_id"], "pid": last["pid"],
                                              "rank": last["rank"]}}


def select(parts: list[Part], report_id: int, pid: int | None, device: int | None, stream: int | None,
           t_ns: int, tol_ns: int = 0) -> Selection:
    """The kernel at run-clock time ``t_ns`` in a GPU lane, with its launch and (NCCL) its collective."""
    offs, _ = offsets(parts)
    index = next((i for i, p in enumerate(parts) if p.report_id == report_id), None)
    if index is None:
        return {"kernel": None}
    part, off = parts[index], offs[index]
    if not part.trace.has_rows("kernels"):
        return {"kernel": None}
    row = _kernel_at(part, pid, device, stream, int(t_ns) - off, max(0, int(tol_ns)))
    if row is None:
        return {"kernel": None}
    s, e, name, cat, corr, kpid, _tid, dev, st = row
    out: Selection = {"kernel": {
        "report_id": report_id, "pid": kpid, "device": dev, "stream": st, "name": name or "", "category": cat,
        "start_ns": int(s) + off, "end_ns": int(e) + off, "correlation_id": corr,
        "lane_id": f"{report_id}:{kpid}:gpu:{dev}:{st}"}}
    launch = _launch(part, kpid, corr)
    out["launch"] = None if launch is None else {
        "start_ns": int(launch[0]) + off, "end_ns": int(launch[1]) + off, "name": launch[2], "tid": launch[3],
        "lane_id": f"{report_id}:{kpid}:api:{launch[3]}"}
    out["collective"] = collective(parts, index, kpid, name, int(s)) if cat == "nccl" and name else None
    return out
