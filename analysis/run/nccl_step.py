"""The run step's analysis of an NCCL debug log (``analysis.readers.nccl``), and its join with the run's
nsys reports.

A log is small next to a trace, so it is analyzed inside the run-level step (``AnalysisStep.RUN``): its
network path (nodes, ranks, NICs, per-pair transports, rings and trees, settings, warnings), the NET rules'
findings (``analysis.diagnosis.nccl``) and the log's verdict. ``join`` names which NCCL ranks each nsys
report of the run holds (same host and pid, else same rank on the same host, else same rank), so the
run's verdict can say which rank of the profiled job the log is about.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from analysis import fmt
from analysis.diagnosis.findings import Finding
from analysis.model.network import NetworkMatrix
from analysis.network_path import NetworkPath, PathFile, PathLeftOut, Rank, RunNetworkPath
from analysis.readers import ToolKind
from analysis.report_types import InterNodeTraffic, JoinedReport, NotJoined, PathLink, ReportInfo, RuleOutcome
from analysis.results import RuleStatus, RunWarning, Verdict
from analysis.run.facts import ReportResult

if TYPE_CHECKING:  # the NCCL reader is imported only for a run with a log (20 ms of every nsys analysis)
    from analysis.readers.nccl.merge import LogSummary

# The verdict kind of a run whose story is the NCCL log's (analysis.diagnosis.verdict.KINDS).
VERDICT_KIND = "network"
NEXT_STEP = "read the run's network path (transport, GPUDirect, NIC per GPU) and fix the first problem it names"


def analyze_logs(logs: Sequence[tuple[Path, str]], spec_text: str,
                 thresholds: Mapping[str, Any] | None = None) -> list[ReportResult]:
    """A run's NCCL logs (one per rank or per node, or one for the job), in run order: the first log's job
    merged into one network path (``analysis.readers.nccl.load_job``: ranks seen in several files once, files of
    another job left out with the reason). The first log of the job carries the path, the findings and the
    verdict; each other log its own counts and the file it was merged into (or why it was left out)."""
    from analysis.diagnosis import nccl as diagnose
    from analysis.readers.nccl import load_job
    from analysis.readers.nccl.merge import summary

    job = load_job([(Path(p), label) for p, label in logs])
    log = job.log
    network_path = log.path()
    if len(job.files) > 1 or job.left_out:
        network_path = dataclasses.replace(
            network_path,
            files=tuple(PathFile(file=f, joined_by=job.joined_by[i - 1]) if i else PathFile(file=f)
                        for i, f in enumerate(job.files)),
            left_out=tuple(PathLeftOut(file=x.file, reason=x.reason) for x in job.left_out))
    own = {r.id for r in diagnose.registry()}
    found = diagnose.findings(log, {k: v for k, v in (thresholds or {}).items() if k.split(".")[0] in own} or None)
    sentence = diagnose.verdict(log, found)
    # The finding the sentence speaks for: the first serious one, in the order the NET rules rank them.
    lead = next((f for f in found if f.severity in ("critical", "warning")), None)
    lead_label = job.files[0]
    placed = [_placed(f, lead_label) for f in found]
    outcomes: dict[str, RuleOutcome] = {}
    for f in placed:
        o = outcomes.setdefault(f.rule_id, {"status": "ok", "reason": None, "findings": 0})
        o["findings"] += 1
    left = {x.index: x for x in job.left_out}
    out: list[ReportResult] = []
    for i, (_path, label) in enumerate(logs):
        if i == job.members[0]:
            info = _info(label, spec_text, summary(log), network_path)
            if sentence:
                info["nccl_verdict"] = {"text": sentence, "rule_id": lead.rule_id if lead else None,
                                        "next_step": lead.advice if lead else NEXT_STEP}
            out.append(ReportResult(label, ToolKind.NCCL.value, info, placed, outcomes,
                                    {"rank": None, "session_start_utc_ns": None}, None, spec_text))
            continue
        info = _info(label, spec_text, job.summaries[i])
        if i in left:
            info["nccl_left_out"] = left[i].reason
        else:
            info["nccl_merged_into"] = lead_label
        out.append(ReportResult(label, ToolKind.NCCL.value, info, [], {},
                                {"rank": None, "session_start_utc_ns": None}, None, spec_text))
    return out


def _info(label: str, spec_text: str, own: LogSummary, network_path: NetworkPath | None = None) -> ReportInfo:
    """A log's report summary: its version, host (a log of one node), counts (``own``: the log's own
    ``merge.summary``, or the merged job's for its first log) and, for the job's first log, the job's network
    path (as JSON, as the summary is saved between the two steps; ``run_network_path`` reads it back)."""
    info: ReportInfo = {"file": label, "tool": ToolKind.NCCL.value}
    if own.get("version"):
        info["tool_version"] = str(own["version"])
    hosts = [h for h in own.get("hosts") or [] if h]
    if len(hosts) == 1:  # a log of one node names the report's host (as its ingest summary did)
        info["host"] = str(hosts[0])
    info["counts"] = dict(own.get("counts") or {})
    info["window"] = {"spec": spec_text, "phase": "all", "reason": "an NCCL log has no timeline: the whole log",
                      "start_ns": None, "end_ns": None}
    if network_path is not None:
        info["network_path"] = network_path.to_json()
    return info


def log_warnings(results: Sequence[ReportResult]) -> list[RunWarning]:
    """The run's warning about NCCL logs left out of its network path (another job's, or a file given twice)."""
    left = [r.info for r in results if r.tool == ToolKind.NCCL and r.info.get("nccl_left_out")]
    if not left:
        return []
    into = next((r.label for r in results if r.tool == ToolKind.NCCL and "network_path" in r.info), None)
    parts = "; ".join(f"{i['file']}: {i['nccl_left_out']}" for i in left[:10])
    more = f" and {fmt.count(len(left) - 10)} more" if len(left) > 10 else ""
    return [{"code": "nccl_logs_left_out",
             "message": f"{fmt.count(len(left))} NCCL log(s) left out of the run's network path (built from {into} and the "
                        f"logs of its job): {parts}{more}. Upload another job's logs as their own run.",
             "reports": [i["file"] for i in left], "ranks": []}]


_V = TypeVar("_V")


def split_overrides(thresholds: Mapping[str, _V] | None) -> tuple[dict[str, _V], dict[str, _V]]:
    """A job's threshold overrides (``RULE.name`` -> value, as given: each registry checks its own) split into the
    default registry's and the NET rules' (their own registry, ``analysis.diagnosis.nccl``)."""
    if not thresholds:
        return {}, {}  # without the NET rules (and the NCCL reader they import)
    from analysis.diagnosis import nccl as diagnose

    own = set(diagnose.registry().ids())
    core: dict[str, _V] = {}
    net: dict[str, _V] = {}
    for key, value in (thresholds or {}).items():
        (net if str(key).partition(".")[0] in own else core)[key] = value
    return core, net


def check_net_overrides(net: Mapping[str, Any]) -> dict[str, float]:
    """The NET rules' overrides checked (name, type, range) as numbers; raises ``ThresholdError``."""
    if not net:
        return {}
    from analysis.diagnosis import nccl as diagnose

    return diagnose.registry().validate_overrides(net)


def rule_statuses(results: Sequence[ReportResult]) -> list[RuleStatus]:
    """The NET rules' status on a run with NCCL logs (none without one): ``ok`` with their findings' count."""
    logs = [r for r in results if r.tool == ToolKind.NCCL]
    if not logs:
        return []
    from analysis.diagnosis import nccl as diagnose

    return [RuleStatus(rule.id, "ok", None, sum(int(o["findings"] or 0) for r in logs if (o := r.rules.get(rule.id))))
            for rule in diagnose.registry()]


def _placed(f: Finding, label: str) -> Finding:
    """The finding as the run's other findings are: its report, and the phase 'all' (the whole log)."""
    return dataclasses.replace(f, report=f.report or label, phase=f.phase or "all")


def _short(host: Any) -> str:
    return str(host or "").split(".")[0].lower()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def join(network_path: NetworkPath, reports: Sequence[Mapping[str, Any]]) -> list[JoinedReport]:
    """Each nsys report of the run (``reports``: their summaries) with the log's ranks it holds: matched by
    host and pid where the report names its processes and the log its ranks' (a report whose processes are
    no rank of the log is of another run: not joined, ``not_joined`` says why), else by host and rank, else
    by rank alone (a log without hosts), else by host. Hosts compare without their domain,
    case-insensitively."""
    return [j for j in join_all(network_path, reports) if j.get("nccl_ranks")]


def join_all(network_path: NetworkPath, reports: Sequence[Mapping[str, Any]]) -> list[JoinedReport]:
    """``join``'s matches, and each nsys report it could not match with ``nccl_ranks`` empty and the reason."""
    ranks = network_path.ranks
    procs = _log_processes({r.rank: r for r in ranks})
    out: list[JoinedReport] = []
    for rep in reports:
        if rep.get("tool") != ToolKind.NSYS:
            continue
        host, rank, pids = _short(rep.get("host")), _int(rep.get("rank")), _report_pids(rep)
        file, shown = rep.get("file"), rep.get("host")
        if host and pids and procs:
            hits = sorted({procs[(host, p)] for p in pids if (host, p) in procs})
            if hits:
                out.append(JoinedReport(report=file, host=shown, rank=rank, by="host+pid", nccl_ranks=hits))
            else:
                out.append(JoinedReport(report=file, host=shown, rank=rank, by=None, nccl_ranks=[],
                                  reason=f"its processes ({', '.join(map(str, sorted(pids)[:4]))} on {shown}) "
                                         "are no rank of the log: another run"))
            continue
        by = "host+rank"
        hits_rows: list[Rank] = []
        if rank is not None:
            hits_rows = [r for r in ranks if host and _short(r.host) == host and r.rank == rank]
        if not hits_rows and rank is not None and not any(r.host for r in ranks):
            by = "rank"
            hits_rows = [r for r in ranks if r.rank == rank]
        if not hits_rows and host:
            by = "host"
            hits_rows = [r for r in ranks if _short(r.host) == host]
        if hits_rows:
            out.append(JoinedReport(report=file, host=shown, rank=rank, by=by,
                                    nccl_ranks=sorted({r.rank for r in hits_rows})))
    return out


def _report_pids(rep: Mapping[str, Any]) -> set[int]:
    """The process ids an nsys report's summary names (its processes, when the summary lists them)."""
    pids: set[int] = set()
    for key in ("pid", "pids"):
        value = rep.get(key)
        for v in value if isinstance(value, list) else [value]:
            if (n := _int(v)) is not None:
                pids.add(n)
    for p in rep.get("processes") or []:
        if isinstance(p, Mapping) and (n := _int(p.get("pid"))) is not None:
            pids.add(n)
    return pids


# A kernel of NCCL's names its collective: ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_AllGather_RING_LL.
_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]{1,40})")


def _family(transport: str) -> str:
    parts = transport.split("/")
    return "/".join(parts[:2]) if parts[0] in ("NET", "P2P") and len(parts) > 1 else parts[0]


def inter_node_traffic(network_path: NetworkPath, results: Sequence[ReportResult]) -> InterNodeTraffic | None:
    """What crosses nodes, joined: the collectives the run's nsys reports ran (from their NCCL kernels' names)
    and the transports the log shows between ranks of different nodes, with GPUDirect RDMA where it applies.
    None when the log shows no inter-node pair or no nsys report ran an NCCL kernel."""
    pairs = [p for p in network_path.pairs if p.inter_node is True]
    collectives: list[str] = []
    for r in results:
        if r.tool != ToolKind.NSYS:
            continue
        for k in r.info.get("top_kernels") or []:
            m = _COLLECTIVE.match(str(k.get("name") or "")[:200]) if isinstance(k, Mapping) else None
            if m and m.group(1) not in collectives:
                collectives.append(m.group(1))
    if not pairs or not collectives:
        return None
    transports = sorted({_family(t) for p in pairs for t in p.transports})
    gdr = [p.gdr for p in pairs if p.gdr is not None]
    return {"collectives": collectives, "transports": transports, "gdr": all(gdr) if gdr else None}


def _traffic_sentence(traffic: InterNodeTraffic) -> str:
    colls = traffic["collectives"]
    what = " and ".join(colls[:3]) + (" ..." if len(colls) > 3 else "")
    gdr = "" if traffic["gdr"] is None else f", GPUDirect RDMA {'on' if traffic['gdr'] else 'off'}"
    return f"the inter-node {what} run{'s' if len(colls) == 1 else ''} over {', '.join(traffic['transports'])}{gdr}"


def run_network_path(results: Sequence[ReportResult]) -> RunNetworkPath | None:
    """The run's network path: its NCCL logs' job (``analyze_logs``: one path merged from the logs of one job,
    with ``files`` and ``left_out`` when there are several), with the first log's report label and the join
    with the run's nsys reports; None without a log. The path is read back from the log's report summary (saved
    between the two steps as JSON)."""
    logs = [r for r in results if r.tool == ToolKind.NCCL and isinstance(r.info.get("network_path"), Mapping)]
    if not logs:
        return None
    first = logs[0]
    path = NetworkPath.from_json(first.info["network_path"])
    matched = join_all(path, [r.info for r in results])
    joined = [j for j in matched if j["nccl_ranks"]]
    not_joined = tuple(NotJoined(report=j["report"], reason=j["reason"]) for j in matched if not j["nccl_ranks"])
    return RunNetworkPath(report=first.label, path=path, not_joined=not_joined or None, joined=tuple(joined) or None,
                          inter_node_traffic=inter_node_traffic(path, results) if joined else None)


def achieved_links(run_path: RunNetworkPath | None, matrix: NetworkMatrix | None,
                   results: Sequence[ReportResult]) -> RunNetworkPath | None:
    """The run's path with each link's achieved bandwidth from the nsys exports' NCCL network ranges (``matrix``:
    the run's ``network``) next to the transport the log says carried it (``links``, and how they were joined:
    ``links_join``); as it is without a path or links.

    Premise: the exports and the log are ranks of one job, so a rank number means one process in both (the
    exports' network ranges name NCCL's ranks; each export's rank places them on hosts). Checked first by host
    and process id where both sides have them (NCCL's lines carry ``host:pid``, the exports record their
    processes): each export's process must be the log's rank of the same number. Where either side has no
    pid, by host and rank (each export's rank on the host the log puts that rank on), and ``links_join.by_reason``
    says why. Both need the exports' world size to equal the log's. Otherwise nothing is joined and
    ``links_join.reason`` says why."""
    if run_path is None or not matrix or not matrix.get("links"):
        return run_path
    network_path = run_path.path
    log_ranks = {r.rank: r for r in network_path.ranks}
    world = max((r.nranks for r in log_ranks.values() if r.nranks is not None), default=None)
    world = world or (len(log_ranks) or None)
    nsys = [r.info for r in results if r.tool == ToolKind.NSYS]
    sizes = {n for i in nsys if (n := _int(i.get("world_size"))) is not None}
    by, by_reason = _link_basis(log_ranks, nsys)
    why = None
    if len(sizes) == 1 and world is not None and sizes != {world}:
        why = (f"the exports are ranks of a job of {sizes.pop()}, the log's job has {world} ranks: "
               "not the same run, so their rank numbers name different processes")
    else:
        why = _rank_mismatch(log_ranks, nsys, by)
    if why is not None:
        return dataclasses.replace(run_path, links_join={"joined": False, "reason": why, "by": by,
                                                         "by_reason": by_reason})
    pairs = {(p.src, p.dst): p for p in network_path.pairs}
    speeds: dict[tuple[str, int], int] = {}
    for nic in network_path.nics:
        if nic.speed_mbps:
            speeds[(_short(nic.host), nic.index)] = nic.speed_mbps
    out: list[PathLink] = []
    for link in matrix["links"]:
        pair = pairs.get((link["sender"], link["receiver"]))
        transports: list[str] | None = None
        nics: list[int] = []
        gdr, inter_node, nic_speed = None, link["inter_node"], None
        if pair is not None:
            rank = log_ranks.get(pair.src)
            host = _short(rank.host if rank else None)
            nic_speeds = [speeds[(host, n)] for n in pair.nics if (host, n) in speeds]
            transports, nics = list(pair.transports), list(pair.nics)
            gdr, inter_node = pair.gdr, pair.inter_node
            nic_speed = min(nic_speeds) if nic_speeds else None
        out.append({"sender": link["sender"], "receiver": link["receiver"], "sender_host": link["sender_host"],
                    "receiver_host": link["receiver_host"], "bytes": link["bytes"], "transfers": link["transfers"],
                    "in_flight_ns": link["in_flight_ns"], "bandwidth_bps": link["bandwidth_bps"],
                    "channels": link["channels"], "transports": transports, "nics": nics, "gdr": gdr,
                    "inter_node": inter_node, "nic_speed_mbps": nic_speed})
    return dataclasses.replace(run_path, links=tuple(out), links_join={
        "joined": True, "reason": None, "without_log_pair": sum(1 for r in out if r["transports"] is None), "by": by,
        "by_reason": by_reason})


def _log_processes(log_ranks: Mapping[int, Rank]) -> dict[tuple[str, int], int]:
    """(short host, pid) -> the log's rank of that process."""
    out: dict[tuple[str, int], int] = {}
    for rank, r in log_ranks.items():
        host, pid = _short(r.host), r.pid
        if host and pid is not None:
            out.setdefault((host, pid), rank)
    return out


def _link_basis(log_ranks: Mapping[int, Rank], nsys: Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
    """How the exports' ranks are checked against the log's: ``host+pid`` where every export with a rank names
    its host and processes and the log names its ranks' processes, else ``host+rank`` and why."""
    ranked = [i for i in nsys if _int(i.get("rank")) is not None]
    if not _log_processes(log_ranks):
        return "host+rank", "the log names no host and process id for its ranks"
    lacking = [i for i in ranked if not _short(i.get("host")) or not _report_pids(i)]
    if lacking or not ranked:
        name = Path(str(lacking[0].get("file"))).name if lacking else "no export"
        return "host+rank", f"{name} records no host or process id"
    return "host+pid", None


def _rank_mismatch(log_ranks: Mapping[int, Rank], nsys: Sequence[Mapping[str, Any]],
                   by: str) -> str | None:
    """Why an export's rank is not the log's rank of that number (None: every one is)."""
    procs = _log_processes(log_ranks)
    for i in nsys:
        rank, host = _int(i.get("rank")), _short(i.get("host"))
        if rank is None:
            continue
        name = Path(str(i.get("file"))).name
        if by == "host+pid":
            pids = sorted(_report_pids(i))
            found = sorted({procs[(host, p)] for p in pids if (host, p) in procs})
            if not found:
                theirs = sorted(pid for (h, pid) in procs if h == host)[:4]
                return (f"{name} is process {', '.join(map(str, pids[:4]))} on {i.get('host')}, which is no rank of "
                        f"the log (its processes on that host: {', '.join(map(str, theirs)) or 'none'}): not the "
                        "same run (a restarted job has new process ids)")
            if rank not in found:
                return (f"{name} is rank {rank}, but its process ({i.get('host')}:{pids[0]}) is the log's rank "
                        f"{', '.join(map(str, found))}: the exports and the log number their ranks differently")
            continue
        theirs_rank = log_ranks.get(rank)
        log_host = _short(theirs_rank.host if theirs_rank else None)
        if host and log_host and log_host != host:
            return (f"{name} is rank {rank} on {i.get('host')}, the log's rank {rank} is on "
                    f"{theirs_rank.host if theirs_rank else None}: not the same run")
    return None


def with_network(verdict: Verdict | None, results: Sequence[ReportResult],
                 network_path: RunNetworkPath | None) -> Verdict | None:
    """The run's verdict with the NCCL log's sentence: alone when the run has no nsys verdict, else after the
    trace's own sentence (the log says why its communication costs what it does, or what failed)."""
    said = next((r.info["nccl_verdict"] for r in results
                 if r.tool == ToolKind.NCCL and isinstance(r.info.get("nccl_verdict"), Mapping)), None)
    if said is None:
        return verdict
    joined = (network_path.joined if network_path else None) or ()
    where = ""
    if joined:
        parts = [f"{Path(str(j['report'])).name} holds NCCL rank{'s' if len(j['nccl_ranks']) > 1 else ''} "
                 f"{', '.join(str(n) for n in j['nccl_ranks'])}" for j in joined[:4]]
        traffic = network_path.inter_node_traffic if network_path else None
        if traffic:
            parts.append(_traffic_sentence(traffic))
        where = " (" + "; ".join(parts) + ")"
    if verdict is None:
        return Verdict(VERDICT_KIND, f"From the NCCL log{where}: {said['text']}", None,
                       str(said.get("next_step") or NEXT_STEP), said.get("rule_id"))
    lead = "Why, from the NCCL log" if verdict.kind == "communication" else "The NCCL log also says"
    text = verdict.text.rstrip()
    return dataclasses.replace(verdict, text=f"{text}{'' if text.endswith('.') else '.'} {lead}{where}: {said['text']}")


__all__ = ["achieved_links", "analyze_logs", "log_warnings", "check_net_overrides", "inter_node_traffic", "join", "join_all", "rule_statuses", "run_network_path",
           "split_overrides", "with_network"]
