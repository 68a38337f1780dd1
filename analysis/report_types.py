"""The JSON form of a report's object (``reports[]``) as the analysis holds it between its two steps, as
TypedDicts: the headline facts a reader's ``summarize`` returns (``analysis.diagnosis.summary``), what step 1 adds
to them, and the run's collective split (``CollectiveSplit``). The parts that have a result type (breakdown, window,
NVTX ranges, the loop's iterations with their step records and anatomy, ncu kernels, top kernels) are built as that
type (``analysis.results``, ``analysis.result_parts``) and enter this object as its ``to_json()``; what is typed here is
what has no such type yet (the NVTX step statistics, a host-paced loop's latency and headroom, the network, the
collective split). ``analysis.results.ReportSummary`` is the object read back as dataclasses.

Standard library only, beside the contract: every layer (readers to views) imports it.
"""
from __future__ import annotations

from typing import Any, NotRequired, Required, TypedDict

from analysis.result_parts import JSON

# -- headline facts (analysis.diagnosis.summary, analysis.diagnosis.ncu_summary, the NCCL reader) -------------------


class Device(TypedDict):
    """A GPU a report used: its CUDA ordinal and name."""

    id: int | None
    name: str | None


class CopyKind(TypedDict):
    """An nsys report's copies of one kind (``memcpy_by_kind``): how many, their bytes and time."""

    kind: str | None
    count: int
    bytes: int
    total_ns: int


class Degraded(TypedDict):
    """A part of the export ingest could not read: its table, the columns, and what that costs the analysis."""

    table: str | None
    columns: list[str]
    effect: str


# -- what step 1 adds (analysis.run.runner.analyze_report) ------------------------------------------------------


class NvtxStep(TypedDict):
    """One instance of the NVTX range that is the step (``analysis.loops.iterations``)."""

    index: int
    pid: int | None
    tid: int | None
    start_ns: int
    end_ns: int
    cpu_ns: int
    wall_ns: int
    gpu_start_ns: int | None
    gpu_end_ns: int | None
    gpu_ns: int
    gpu_op_ns: int
    gpu_ops: int


class NvtxStepStats(TypedDict, total=False):
    """The NVTX step summary without its instances (``analysis.loops.iterations.compact``): the range, the
    statistics of its instances and the slowest ones; without a step only ``has_nvtx``, ``range`` (None),
    ``domain``, ``count``, ``slowest`` and the ``reason``. ``p99_ns``: added by the loop finder."""

    has_nvtx: bool
    range: str | None
    range_example: str | None
    domain: str | None
    count: int
    gpu_share_pct: float | None
    slowest: list[NvtxStep]
    mean_ns: float
    median_ns: float
    min_ns: int
    max_ns: int
    p10_ns: float
    p90_ns: float
    p99_ns: float | None
    stdev_ns: float
    cv_pct: float
    spread_pct: float | None
    wall_median_ns: float
    wall_min_ns: int
    wall_max_ns: int
    wall_spread_pct: float | None
    note: str | None
    reason: str | None


class NvtxIterations(NvtxStepStats, total=False):
    """The NVTX step summary (``analysis.loops.iterations.iterations``) with every instance in time order (a loop
    that is no NVTX one holds an empty one)."""

    items: list[NvtxStep]


class StepLatency(TypedDict):
    """A host-paced loop's median per iteration of launch, queue delay, GPU execution, copies and sync."""

    gpu_exec_ns: int
    copies_ns: int
    launch_ns: int | None
    queue_delay_ns: int | None
    sync_ns: int | None


class PacedFacts(TypedDict):
    """What a host-paced loop could do (``analysis.diagnosis.step_anatomy.paced_facts``)."""

    headroom_per_second: float | None
    headroom_x: float | None
    integrated_gpu: bool
    zero_copy_ns: NotRequired[int]
    advice: NotRequired[str]


class InnerLoop(TypedDict):
    """A nested loop's inner loop: the name that opens it, its period in operations, iterations and runs."""

    opened_by: str | None
    period_ops: int
    iterations: int
    runs: int


class LoopDetail(TypedDict, total=False):
    """How a loop was found (``analysis.loops.phases.Loop.detail``): a kernel pattern's period, regularity and match on
    its unit; a nested loop's outer name and inner loop; an NVTX step's range and domain; a host-synced loop's median
    operations per iteration; and why the NVTX ranges were not the step (``nvtx_reason``)."""

    period_ops: int
    regularity: float
    match: float
    pid: int | None
    device: int | None
    nested: bool
    outer_opened_by: str | None
    inner: InnerLoop
    range: str | None
    domain: str | None
    ops_median: int
    nvtx_reason: str | None


class TransferCounts(TypedDict):
    """A group of a report's network transfers (``analysis.model.network``): how many and their bytes, the attempts
    (retries: those beyond one per transfer) and the time they waited, the completed ones, the time from post to
    completion (summed, and the median), the time at least one was in flight and the achieved bandwidth."""

    transfers: int
    bytes: int
    attempts: int
    retries: int
    waiting_ns: int
    completed: int
    completed_bytes: int
    post_to_done_ns: int
    in_flight_ns: int
    median_post_to_done_ns: int | None
    bandwidth_bps: float | None


class DirectionTransfers(TransferCounts):
    """A report's transfers of one direction (``send``, ``recv``), all peers at once."""

    direction: str


class ChannelTransfers(DirectionTransfers):
    """A report's transfers of one direction, peer pair and channel."""

    sender_rank: int
    receiver_rank: int
    channel: int


class PeerTransfers(DirectionTransfers):
    """A report's transfers of one direction and peer pair, and the channels they used."""

    sender_rank: int
    receiver_rank: int
    channels: int


class ReportNetwork(TypedDict):
    """A report's ``network`` object (``analysis.model.network.report_network``): whether it records NCCL's network
    ranges (and why not), its transfers per peer pair, per channel and per direction, and the bytes sent and
    received (with ranges)."""

    has_ranges: bool
    reason: str | None
    peers: list[PeerTransfers]
    channels: list[ChannelTransfers]
    directions: dict[str, DirectionTransfers]
    bytes_sent: NotRequired[int]
    bytes_received: NotRequired[int]


# -- the parts of an NCCL log's network path (analysis.network_path) written as built -------------------------------
# The path itself and its records are dataclasses (``analysis.network_path``); these are its parts built as JSON
# objects: a node pair's links, nccl-tests' lines and peak, topology links, and the run step's join with the nsys
# reports (``analysis.run.nccl_step``).


class PathNodeLink(TypedDict):
    """An ordered pair of hosts (the same twice: inside a node) with its rank pairs, transports and GPUDirect."""

    src_host: str
    dst_host: str
    rank_pairs: int
    transports: list[str]
    gdr: bool | None


class TopologyLinks(TypedDict):
    """Topology links of one kind (NVL, PCI, SYS, NET ...): how many, the fastest (GB/s), their targets."""

    count: int
    max_bw: float | None
    targets: str


class JoinedReport(TypedDict):
    """An nsys report of the run with the NCCL log's ranks it holds (``nccl_step.join``), and what matched them."""

    report: str | None
    host: str | None
    rank: int | None
    by: str | None
    nccl_ranks: list[int]
    reason: NotRequired[str]


class NotJoined(TypedDict):
    """An nsys report of the run that holds none of the log's ranks, and why."""

    report: str | None
    reason: str


class InterNodeTraffic(TypedDict):
    """What crosses nodes (``nccl_step.inter_node_traffic``): the collectives, the transports, GPUDirect RDMA."""

    collectives: list[str]
    transports: list[str]
    gdr: bool | None


class PathLink(TypedDict):
    """A link of the run's network matrix (``analysis.model.network``) with the transport, NICs, GPUDirect and NIC
    speed the log shows for that rank pair (None/empty: the log has no such pair)."""

    sender: int
    receiver: int
    sender_host: str | None
    receiver_host: str | None
    bytes: int
    transfers: int
    in_flight_ns: int
    bandwidth_bps: float | None
    channels: int
    transports: list[str] | None
    nics: list[int]
    gdr: bool | None
    inter_node: bool | None
    nic_speed_mbps: int | None


class LinksJoin(TypedDict):
    """Whether the exports' links were joined with the log's pairs (``nccl_step.achieved_links``), on what basis
    (``host+pid`` or ``host+rank`` and why), why not, and how many links have no pair in the log."""

    joined: bool
    reason: str | None
    without_log_pair: NotRequired[int]
    by: str
    by_reason: str | None


class ReportSaving(TypedDict):
    """An ncu report's headline estimated saving (``analysis.diagnosis.ncu_gains.report_saving``): ns, its share, and
    the time it is drawn from."""

    ns: int
    pct: float | None
    drawn_from: str


class NcclSentence(TypedDict):
    """An NCCL log's sentence for the run's verdict: the text, the NET rule it speaks for and the next step."""

    text: str
    rule_id: str | None
    next_step: str


class RuleOutcome(TypedDict):
    """How one rule went on one report in step 1 (``ReportResult.rules``): ``ok``, ``skipped``, ``error``,
    ``run_level`` (judged by the run step) or ``missing``, the reason, and its findings there."""

    status: str
    reason: str | None
    findings: int


class ReportInfo(TypedDict, total=False):
    """A report's JSON object as the analysis builds it: the headline facts (every tool: ``file``, ``tool``; nsys and
    ncu: the ``tool_version`` ... ``top_kernels``; ncu only: ``schema_version``, ``layout``, ``kernels_profiled``,
    ``durations_unknown``; nsys only: ``memcpy_*``, ``dominant_kernel``, ``degraded``, ``system_metrics``), then what
    step 1 adds (nsys: ``breakdown``, ``iterations``, ``nvtx``, ``launches``, ``network``, ``phases``,
    ``idle_anatomy``; ncu: ``kernels``, ``estimated_saving``; both: ``window``). Typed parts of
    ``analysis.result_parts`` are held in their JSON form (``JSON``)."""

    file: Required[str]
    tool: Required[str]
    tool_version: str | None
    schema_version: int | None
    layout: str | None
    host: str | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    job_id: str | None
    session_start_utc_ns: int | None
    pids: list[int]
    devices: list[Device]
    counts: dict[str, int]
    gpu_time_ns: int | None
    memcpy_bytes: int
    kernels_profiled: int
    durations_unknown: int
    span_ns: int | None
    top_kernels: list[JSON]
    dominant_kernel: JSON | None
    memcpy_by_kind: list[CopyKind]
    degraded: list[Degraded]
    system_metrics: JSON
    breakdown: JSON
    iterations: JSON  # ``analysis.result_parts.Iterations`` as JSON
    nvtx: JSON
    launches: JSON
    network: ReportNetwork
    phases: list[JSON]
    kernels: list[JSON]
    window: JSON
    estimated_saving: ReportSaving
    idle_anatomy: list[JSON]
    # The run step adds: multi-rank runs, the report's own findings ranked (``analysis.run.rollup``); nsys, its
    # verdict (``analysis.results.Verdict`` as JSON); an NCCL log, the job's network path (its first log:
    # ``analysis.network_path.NetworkPath`` as JSON), the log's sentence for the verdict, or the log it was merged into or
    # why it was left out.
    findings: list[FindingJson]
    verdict: JSON
    network_path: JSON
    nccl_verdict: NcclSentence
    nccl_merged_into: str
    nccl_left_out: str


# -- a finding as JSON (analysis.diagnosis.findings.Finding.to_dict, app.services.reads.findings) -------------------


class EvidenceJson(TypedDict, total=False):
    """One place a finding shows, as JSON (``Evidence.to_dict``: only the keys that are set); ``detail``: the rule's
    own numbers about it."""

    start_ns: int
    end_ns: int
    device: int
    stream: int
    pid: int
    rank: int
    name: str
    nvtx: str
    value_ns: int
    detail: dict[str, Any]


class RankCost(TypedDict):
    """One rank's part of a finding rolled up across ranks (``analysis.run.rollup``): its report, the cost and how
    many of its findings the entry holds."""

    rank: int | None
    host: str | None
    report: str
    impact_ns: int
    findings: int


class HostCost(TypedDict):
    """One host's part of a finding rolled up across ranks: its ranks with the finding, of its ranks, and the cost."""

    host: str | None
    ranks: int
    of_ranks: int
    impact_ns: int


class FindingJson(TypedDict, total=False):
    """A finding as JSON: as the analysis writes it (``Finding.to_dict``, its rule's own keys at the top level beside
    these, the engine's keys where they apply), or as the service gives it (``finding_to_dict``: its ids, no
    ``phase``, the rule's own keys under ``extra``). A rule's own keys, those the run step sets included (COMM001's
    and HOST003's waiting, ``analysis.run.waiting``), are typed on the rule (``analysis.results``), not here: the
    analysis reads them on ``Finding.extra``."""

    rule_id: Required[str]
    severity: Required[str]
    title: Required[str]
    message: Required[str]
    impact_ns: Required[int]
    impact_pct: Required[float | None]
    advice: Required[str]
    report: Required[str | None]
    rank: Required[int | None]
    evidence: Required[list[EvidenceJson]]
    evidence_total: Required[int]
    phase: str | None
    # The engine's keys (``analysis.results.EngineExtra``) that the run step writes or reads.
    impact_per_step_ns: int
    per_rank: list[RankCost]
    per_host: list[HostCost]
    ranks_with_finding: int
    impact_summed_ns: int
    impact_basis: str
    # The service's: the finding's ids, and the rule's own keys.
    id: int
    run_id: int
    report_id: int | None
    position: int
    extra: dict[str, Any]


# -- the run's collective split (analysis.run.runner: analysis.diagnosis.rules.nsys.run_nodes, analysis.run.waiting) --


class RankSplit(TypedDict):
    """One rank's collectives split (``run_nodes.collective_split``): its waiting for the last rank and its transfer
    after it, summed over the matched instances; with launches recorded, its host's launch delay and GPU queue."""

    rank: int | None
    host: str | None
    pid: int | None
    wait_ns: int
    transfer_ns: int
    wait_pct: float
    launch_delay_ns: NotRequired[int]
    gpu_queue_ns: NotRequired[int]


class HostSplit(TypedDict):
    """One host's ranks' collectives split, summed."""

    host: str | None
    ranks: int
    wait_ns: int
    transfer_ns: int


class LaunchDelay(TypedDict):
    """The instance and rank whose host launched a collective the longest after the first rank's host did."""

    instance: int
    rank: int | None
    host: str | None
    delay_ns: int
    gpu_queue_ns: int
    in_launch_call_ns: NotRequired[int]
    queued_after_call_ns: NotRequired[int]
    descheduled_in_call_ns: NotRequired[int]


class UnmatchedPairs(TypedDict):
    """The point-to-point kernels left out of the split (``analysis.run.waiting.pairs_only``), and why."""

    kernels: list[str]
    instances: int
    reason: str


class RankWait(TypedDict):
    """One rank in one collective instance: its arrival, its waiting, whom it waited for and its transfer."""

    rank: str
    host: str | None
    arrival_ns: int
    wait_ns: int
    waited_for: str | None
    transfer_ns: int


class WaitItem(TypedDict):
    """One collective instance (``analysis.run.waiting.collective_waits``): its kernel, kind, last rank and ranks."""

    instance: int
    kernel: str
    kind: str
    last: str
    ranks: list[RankWait]


class Participant(TypedDict):
    """One participant's waiting and transfer over every instance, and whom it waited for (ns by rank)."""

    rank: str
    host: str | None
    wait_ns: int
    transfer_ns: int
    waited_for: dict[str, int]


class WaitedOn(TypedDict):
    """A rank the others waited for: their waiting while it was last, and how often it was."""

    rank: str
    host: str | None
    others_wait_ns: int
    instances_last: int


class CriticalRank(WaitedOn):
    """The rank the others waited for the most, its share of the collectives' time and whether it leads the verdict."""

    share_of_collective_time_pct: float
    instances: int
    leads_verdict: bool


class SampleSums(TypedDict):
    """Waiting and transfer summed over ranks, per instance or per step (what comparisons test)."""

    wait_ns: list[int]
    transfer_ns: list[int]


class StepSums(SampleSums):
    """Per step of the reference participant's loop (``reference``), over its ``steps`` steps."""

    reference: str
    steps: int


class WaitSamples(TypedDict):
    per_instance: SampleSums
    per_step: StepSums | None


class KindSplit(TypedDict):
    """The collectives (or the point-to-point kernels) apart: instances, waiting and transfer."""

    instances: int
    wait_ns: int
    transfer_ns: int


class CollectiveWaits(TypedDict):
    """Per instance and rank, whom each rank waited for (``analysis.run.waiting.collective_waits``)."""

    participants: list[Participant]
    items: list[WaitItem]
    items_total: int
    longest_waits: list[WaitItem]
    waited_on: list[WaitedOn]
    critical: CriticalRank | None
    samples: WaitSamples
    by_kind: dict[str, KindSplit]
    clock: str


class MpiCollective(TypedDict):
    """One MPI collective call name across ranks (``analysis.run.mpi``): the ranks making it, the instances paired
    (0 when they cannot be: ``reason``) and how often each rank arrived last."""

    call: str
    ranks: list[str]
    instances: int
    reason: str | None
    last_arrivals: dict[str, int]


class MpiDirection(TypedDict):
    """One direction of the point-to-point calls between two ranks: sends, receives, those matched and why not."""

    sender: str
    receiver: str
    sends: int
    receives: int
    matched: int
    reason: str | None


class MpiRankSplit(TypedDict):
    """One participant's MPI calls split: all of them, then the point-to-point and the collective ones, each as
    calls, time, waiting for another rank and transfer; and whom it waited for (ns by participant)."""

    rank: str
    host: str | None
    calls: int
    time_ns: int
    wait_ns: int
    transfer_ns: int
    point_to_point_calls: int
    point_to_point_time_ns: int
    point_to_point_wait_ns: int
    point_to_point_transfer_ns: int
    collective_calls: int
    collective_time_ns: int
    collective_wait_ns: int
    collective_transfer_ns: int
    waited_for: dict[str, int]


class MpiCritical(TypedDict):
    """The participant the others waited for the most inside MPI calls, and its share of the calls' time."""

    rank: str
    host: str | None
    others_wait_ns: int
    share_of_mpi_time_pct: float


class MpiLeftOut(TypedDict):
    """MPI calls of one name on one participant left out of the split, and why."""

    rank: str
    call: str
    calls: int
    reason: str


class MpiWait(TypedDict):
    """One MPI call that waited for another rank (own clock): its name, kind, occurrence, waiting and transfer."""

    rank: str
    call: str
    kind: str
    occurrence: int
    start_ns: int
    duration_ns: int
    wait_ns: int
    waited_for: str
    transfer_ns: int


class MpiItemRank(TypedDict):
    """One participant in one MPI collective instance: its arrival (own clock), waiting, for whom, and transfer."""

    rank: str
    start_ns: int
    duration_ns: int
    wait_ns: int
    waited_for: str | None
    transfer_ns: int


class MpiItem(TypedDict):
    """One MPI collective instance: the call, its occurrence, the last rank to arrive and each participant."""

    call: str
    instance: int
    last_rank: str
    ranks: list[MpiItemRank]


class MpiSplit(TypedDict):
    """The MPI calls across ranks split into waiting for another rank and transfer (``analysis.run.mpi.mpi_waits``):
    point-to-point messages matched (and why none), collective instances, per direction and per collective name,
    the first instances, per participant, the critical one, the calls left out, the longest waits, the clock and
    how calls were matched."""

    matched: int
    instances: int
    reason: str | None
    directions: list[MpiDirection]
    collectives: list[MpiCollective]
    collective_items: list[MpiItem]
    per_rank: list[MpiRankSplit]
    critical: MpiCritical | None
    left_out: list[MpiLeftOut]
    longest_waits: list[MpiWait]
    clock: str
    matching: str


class CollectiveSplit(TypedDict, total=False):
    """The run's ``collectives``: each matched collective's waiting for the last rank and transfer after it, in total,
    per rank and per host (``run_nodes.collective_split``); the point-to-point kernels left out; whom each rank
    waited for (the keys of ``CollectiveWaits``, where ranks were split); and the MPI calls' split
    (``analysis.run.mpi``)."""

    instances: int
    wait_ns: int
    transfer_ns: int
    longest_launch_delay: LaunchDelay | None
    per_rank: list[RankSplit]
    per_host: list[HostSplit]
    point_to_point_unmatched: UnmatchedPairs
    participants: list[Participant]
    items: list[WaitItem]
    items_total: int
    longest_waits: list[WaitItem]
    waited_on: list[WaitedOn]
    critical: CriticalRank | None
    samples: WaitSamples
    by_kind: dict[str, KindSplit]
    clock: str
    mpi: MpiSplit
