"""What an analysis returns through ``analysis.api``: typed, immutable results with their JSON form.

``AnalysisResult.to_json()`` is the JSON contract of ``goodput analyze --format json`` (and of what the
service stores): the same keys in the same order as before these types existed, so the JSON text is
byte-identical. ``from_json`` reads that form back (``from_json(x).to_json() == x`` for every result the
analysis writes). The stable parts of a report summary (top and dominant kernel, system metrics, NVTX,
launches, phases, loop and iterations, idle anatomy, ncu kernels) are typed in ``analysis.result_parts``. Every
rule declares an ``extra_type`` (a rule trait) and builds its rule-specific numbers as that typed ``*Extra`` dataclass
(``extra_json`` makes them a finding's ``extra``; the schema closes them: no other key than the type's and the
engine's, ``EngineExtra``); the ncu rules share ``NcuExtra``, the NET rules ``NetExtra``. Nested parts of an extra
(rows, per-name maps) and the report-summary keys still changing shape stay JSON (``details``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from analysis.network_path import NetworkPath, RunNetworkPath
from analysis.result_parts import (
    DominantKernel,
    IdleAnatomy,
    Iterations,
    KernelTotal,
    Launches,
    NcuKernel,
    NvtxSummary,
    PhaseSpan,
    SystemMetrics,
    TopKernel,
    top_kernel_from_json,
)

JSON = dict[str, Any]
# The version of this JSON contract (``analysis.contract``): bumped when a reader must know of a change.
SCHEMA_VERSION = 1


def _json(*, key: str | None = None, optional: bool = False, flat: bool = False, omit: bool = False,
          run_step: bool = False) -> Any:
    """How a field is written in the JSON (read by ``analysis.contract`` to generate the schema): under
    another ``key``; left out when empty (``optional``); its mapping's keys beside the fixed ones
    (``flat``); or not at all (``omit``). ``run_step``: an extra's field the run step sets (``analysis.run``),
    written after the engine's keys, where the run step has always added it (``Finding.to_dict``)."""
    meta = {k: v for k, v in (("key", key), ("optional", optional), ("flat", flat), ("omit", omit),
                              ("run_step", run_step)) if v}
    return {"json": meta}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One place where a finding shows (see ``analysis.diagnosis.findings.Evidence``); absent keys are None."""

    start_ns: int | None = field(default=None, metadata=_json(optional=True))
    end_ns: int | None = field(default=None, metadata=_json(optional=True))
    device: int | None = field(default=None, metadata=_json(optional=True))
    stream: int | None = field(default=None, metadata=_json(optional=True))
    pid: int | None = field(default=None, metadata=_json(optional=True))
    rank: int | None = field(default=None, metadata=_json(optional=True))
    name: str | None = field(default=None, metadata=_json(optional=True))
    nvtx: str | None = field(default=None, metadata=_json(optional=True))
    value_ns: int | None = field(default=None, metadata=_json(optional=True))
    detail: Mapping[str, Any] = field(default_factory=dict, metadata=_json(optional=True))

    def to_json(self) -> JSON:
        out = {"start_ns": self.start_ns, "end_ns": self.end_ns, "device": self.device, "stream": self.stream,
               "pid": self.pid, "rank": self.rank, "name": self.name, "nvtx": self.nvtx,
               "value_ns": self.value_ns, "detail": self.detail}
        return {k: v for k, v in out.items() if v is not None and v != {}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(**data)


_FINDING_KEYS = ("rule_id", "severity", "title", "message", "impact_ns", "impact_pct", "advice", "report", "rank",
                 "evidence", "evidence_total", "phase")


class SharedCpuRank(TypedDict):
    """One rank of a ``shared_cpu`` warning: the CPUs it ran on most, its time there and on any CPU."""

    name: str
    cpus: list[int]
    on_these_cpus_ns: int
    on_any_cpu_ns: int


class RunWarning(TypedDict):
    """Something about a run's inputs that makes its cross-rank numbers doubtful (``AnalysisResult.run_warnings``):
    a ``code``, what it means, the reports and ranks it names; a ``shared_cpu`` warning adds its host, the CPUs and
    each rank's time on them."""

    code: str
    message: str
    reports: list[str]
    ranks: list[int]
    host: NotRequired[str]
    cpus: NotRequired[list[int]]
    per_rank: NotRequired[list[SharedCpuRank]]
    cpu_layout: NotRequired[dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class FindingResult:
    """One ranked finding as it leaves the analysis (``impact_pct`` rounded to 3 places, as in the JSON).

    ``extra``: the rule-specific numbers (e.g. ``causes``, ``speedup_pct``, ``host_paced``), after the
    fixed keys in the JSON; typed in the schema by the engine's keys (``EngineExtra``) and the finding's rule's
    ``extra_type`` (every rule declares one)."""

    rule_id: str
    severity: str
    title: str
    message: str
    impact_ns: int
    impact_pct: float | None
    advice: str
    report: str | None
    rank: int | None
    evidence: tuple[Evidence, ...]
    evidence_total: int
    phase: str | None
    extra: Mapping[str, Any] = field(default_factory=dict, metadata=_json(flat=True))

    def to_json(self) -> JSON:
        out: JSON = {
            "rule_id": self.rule_id, "severity": self.severity, "title": self.title, "message": self.message,
            "impact_ns": self.impact_ns, "impact_pct": self.impact_pct, "advice": self.advice,
            "report": self.report, "rank": self.rank, "evidence": [e.to_json() for e in self.evidence],
            "evidence_total": self.evidence_total, "phase": self.phase,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FindingResult:
        return cls(
            rule_id=data["rule_id"], severity=data["severity"], title=data["title"], message=data["message"],
            impact_ns=data["impact_ns"], impact_pct=data["impact_pct"], advice=data["advice"],
            report=data["report"], rank=data["rank"],
            evidence=tuple(Evidence.from_json(e) for e in data["evidence"]),
            evidence_total=data["evidence_total"], phase=data["phase"],
            extra={k: v for k, v in data.items() if k not in _FINDING_KEYS},
        )


@dataclass(frozen=True, slots=True)
class EngineExtra:
    """Keys the engine adds to any rule's finding, each only where it applies (the schema types them on every
    finding): its cost per step on a loop window, its loops, the host-paced mark, the roll-up across ranks,
    whether it owns its idle, where the host CPU was.

    Never constructed, by design: it describes keys, not a value. No finding holds them all; each is set on its
    own, by a different step, on a finding already made: a ``Finding`` holds them as its own fields (the runner's
    per-step cost and host-paced mark, the loops of ``analysis.loops.loop_report.loops_holding``, the roll-up of
    ``analysis.run.rollup``: ``findings.RollUp``; ``host_functions`` by the rules that sampled the CPU, beside their
    own type), except ``owns_idle``, HOST002's type's. It types those keys for the schema (``analysis.contract``) on
    every finding, and ``tests/analysis/test_typed_extras.py`` checks that its fields are exactly those."""

    impact_per_step_ns: int = field(metadata=_json(optional=True))
    steps_in_window: int = field(metadata=_json(optional=True))
    loops: tuple[int, ...] = field(metadata=_json(optional=True))
    host_paced: bool = field(metadata=_json(optional=True))
    per_rank: tuple[Mapping[str, Any], ...] = field(metadata=_json(optional=True))
    per_host: tuple[Mapping[str, Any], ...] = field(metadata=_json(optional=True))
    ranks_with_finding: int = field(metadata=_json(optional=True))
    owns_idle: bool = field(metadata=_json(optional=True))
    host_functions: tuple[Mapping[str, Any], ...] = field(metadata=_json(optional=True))
    # The roll-up of a rule whose cost is one aligned wall time across ranks (``analysis.run.rollup``): the sum over
    # ranks beside it, and what ``impact_ns`` measures.
    impact_summed_ns: int = field(metadata=_json(optional=True))
    impact_basis: str = field(metadata=_json(optional=True))


@dataclass(frozen=True, slots=True)
class SyncExtra:
    """SYNC001: the sync calls, per kernel, by name, and the idle gaps they own."""

    sync_calls: int
    sync_calls_per_kernel: float | None
    sync_call_names: Mapping[str, int]
    idle_gaps: int
    syncs_followed_by_idle: int
    # The idle inside sync calls this rule owns (``owns_idle``) and the calls that hold most of it (``name``, ``ns``,
    # ``calls``). The engine's ``host_functions`` may follow.
    idle_ns: int
    names: list[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class PageableCopyExtra:
    """MEM001: the pageable copies, their bytes, and the asynchronous ones that became synchronous."""

    copies: int
    bytes: int
    async_became_sync: int
    async_became_sync_ns: int


@dataclass(frozen=True, slots=True)
class BlockingCopyExtra:
    """MEM002: the blocking copies, their bytes, the host time blocked and the idle gaps they own."""

    copies: int
    bytes: int
    host_blocked_ns: int
    idle_gaps: int
    # The idle inside copy and memset calls this rule owns (``owns_idle``), by idle-anatomy category, and the calls
    # that hold most of it (``name``, ``ns``, ``calls``).
    idle_ns: int
    by_category: Mapping[str, int]
    names: list[Mapping[str, Any]]
    # The copy kinds of the calls holding most of that idle (``name``, ``copies``, ``pageable``: how many copy pageable
    # host memory), and the rule's premise (the idle is inside copy calls): whether it held, the evidence in words,
    # and whether pinned memory is the fix (None: no copy of those calls is recorded).
    held_copies: list[Mapping[str, Any]]
    premise_holds: bool
    premise: str
    pinned_advice: bool | None


@dataclass(frozen=True, slots=True)
class MemsetExtra:
    """MEM003: the synchronous memsets."""

    memsets: int


@dataclass(frozen=True, slots=True)
class MigrationExtra:
    """MEM004: unified-memory migrations, their bytes and time, by direction."""

    migrations: int
    bytes: int
    migration_ns: int
    to_device: int
    to_host: int
    bytes_to_device: int
    bytes_to_host: int
    # The GPU idle between migrations this rule owns (``owns_idle``), per direction (``ns``, ``gaps``); the migration
    # time with no kernel running; migrations inside kernels, their bytes, and the kernel time they overlap.
    idle_ns: int
    migration_only_ns: int
    # Of ``idle_ns``: the idle while the host thread was switched out (waiting on the faults) and while it ran on the
    # CPU (its own work between read-backs, owned but not counted); the kernel time waiting on page faults; and the
    # rule's premise (migrations cost the GPU time), whether it held and the evidence in words.
    idle_waited_ns: int
    host_work_ns: int
    fault_stall_ns: int
    premise_holds: bool
    premise: str
    idle_by_direction: Mapping[str, Mapping[str, int]]
    in_kernel_migrations: int
    in_kernel_bytes: int
    kernel_overlap_ns: int


@dataclass(frozen=True, slots=True)
class WarmupExtra:
    """PHASE002: the warm-up iterations and the steady iteration's median."""

    warmup_iterations: int
    steady_median_ns: int


@dataclass(frozen=True, slots=True)
class LaunchShapeExtra:
    """KRN004: the time of the small-grid kernels and of all compute kernels."""

    small_kernel_ns: int
    compute_kernel_ns: int
    # The rule's premise on the evidence (``Rule.premise``; docs/rules.md): whether it held, and what showed it.
    premise_holds: bool = True
    premise: str | None = None


@dataclass(frozen=True, slots=True)
class DominantKernelExtra:
    """KRN005: the dominant kernel, its share and launches, and the ncu command that profiles it."""

    kernel: str
    share_pct: float
    launches: int
    ncu_command: str
    launch_skip: int
    # A base name shared by several template instances (full demangled names) is a family: ``instances`` of them,
    # ``is_family`` when none dominates alone; ``instance`` is the costliest (the one ``ncu_command`` profiles
    # when it is a family) and ``instance_share_pct`` its share.
    instances: int = 1
    is_family: bool = False
    instance: str | None = None
    instance_share_pct: float | None = None


@dataclass(frozen=True, slots=True)
class IdleGapsExtra:
    """GPU001: the idle it keeps by cause (``count``, ``total_ns``), the main cause, and by what the host was doing
    (idle-anatomy category). The engine's ``host_functions`` may follow."""

    causes: Mapping[str, Mapping[str, int]]
    main_cause: str
    by_category: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class LowUtilizationExtra:
    """GPU002: the low-utilization regions' span and idle, the rule's premise (the host launched little into them), the
    operations the host launched there and the unified-memory migrations; the SM activity sampled in the regions
    shown, when GPU metrics were collected."""

    low_span_ns: int
    low_idle_ns: int
    premise_holds: bool
    premise: str
    host_launched_ops: int
    uvm_migrations: int
    measured_sm: list[Mapping[str, Any]] | None = field(default=None, metadata=_json(optional=True))


@dataclass(frozen=True, slots=True)
class LaunchBoundExtra:
    """KRN001: the runs of short kernels, their kernels and kernel time, the per-launch overhead and what CUDA graphs
    would save (None: no launch call to measure); the idle in the window's gaps shorter than GPU001's long gap (the per-launch round trip)."""

    runs: int
    short_kernels: int
    short_kernel_ns: int
    per_launch_overhead_ns: int | None
    graph_saving_ns: int | None
    short_gap_idle_ns: int
    short_gaps: int


@dataclass(frozen=True, slots=True)
class TensorCoreExtra:
    """KRN002: the kernels without tensor cores and their share of compute time; what ncu measured of them (per kernel
    name, when an ncu report of the run profiles them); their time by name (``count``, ``total_ns``, top 20)."""

    kernels: int
    compute_share_pct: float
    ncu: Mapping[str, Mapping[str, Any]] | None = field(default=None, metadata=_json(optional=True))
    by_name: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DurationOutlierExtra:
    """KRN003: the kernel shapes (name, process, device, grid, block) and their duration spread (top 20) of
    ``shapes_total``, the largest kernel (None: no compute kernel), the time of the trending shapes and their rank
    correlation with time, and the rule's premise."""

    shapes: list[Mapping[str, Any]]
    shapes_total: int
    dominant_kernel: Mapping[str, Any] | None
    trend_ns: int
    trends: list[Mapping[str, Any]]
    premise_holds: bool
    premise: str


@dataclass(frozen=True, slots=True)
class OsBlockedExtra:
    """HOST001: the idle inside OS runtime calls it owns, by idle-anatomy category, the calls holding most of it
    (``name``, ``ns``, ``calls``), by call and by class of call, the calls' own time, the share of file I/O (None:
    none), the main class, the idle gaps and the loop iterations with such idle. The engine's ``host_functions`` may
    follow."""

    idle_ns: int
    by_category: Mapping[str, int]
    names: list[Mapping[str, Any]]
    by_call: Mapping[str, int]
    by_class: Mapping[str, int]
    os_call_ns: int
    file_io_pct: float | None
    main_class: str
    idle_gaps: int
    iterations_with: int
    iterations: int


@dataclass(frozen=True, slots=True)
class HostSamplesExtra:
    """HOST002 (evidence only, ``owns_idle`` False): the launching threads' CPU samples in idle gaps, the idle per
    owning gap rule, the main kind of work (None: no kind stands out) and the sampled functions (top 20)."""

    owns_idle: bool
    samples_in_idle: int
    by_owner: Mapping[str, int]
    main_kind: str | None
    functions: list[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ClaimedIdle:
    """The idle a rule claims by what the host was doing (``analysis.diagnosis.rules.nsys.claimed``): its time, by
    idle-anatomy category, the calls holding most of it (``name``, ``ns``, ``calls``), and the loop iterations with
    it. Each claiming rule's type adds its own fields."""

    idle_ns: int
    by_category: Mapping[str, int]
    names: list[Mapping[str, Any]]
    iterations_with: int
    iterations: int


@dataclass(frozen=True, slots=True)
class HostCommExtra(ClaimedIdle):
    """HOST003: the claimed idle inside host communication and the window's idle. In a multi-rank run the run-level
    step (``analysis.run.waiting.mpi_apart``) adds the time waiting for an MPI peer, whom it waited for, the idle that
    waiting took off the impact and the impact before it."""

    window_idle_ns: int = 0
    mpi_waiting_ns: int | None = field(default=None, metadata=_json(optional=True, run_step=True))
    mpi_waited_for: Mapping[str, int] | None = field(default=None, metadata=_json(optional=True, run_step=True))
    mpi_waiting_idle_ns: int | None = field(default=None, metadata=_json(optional=True, run_step=True))
    impact_with_waiting_ns: int | None = field(default=None, metadata=_json(optional=True, run_step=True))


@dataclass(frozen=True, slots=True)
class JitExtra(ClaimedIdle):
    """HOST004: the claimed idle inside compilation and module loading, and whether it recurs every loop step."""

    every_step: bool = False


@dataclass(frozen=True, slots=True)
class AllocationExtra(ClaimedIdle):
    """MEM006: the claimed idle inside allocation calls in the loop, and the loop window's idle."""

    window_idle_ns: int = 0


@dataclass(frozen=True, slots=True)
class StartupExtra:
    """PHASE001: the start-up's length and GPU busy time, the host calls filling it (``name``, ``ns``), and its idle
    by category with the first call (when the idle anatomy covers it)."""

    startup_ns: int
    gpu_busy_ns: int
    fillers: list[Mapping[str, Any]]
    idle_anatomy: Mapping[str, Any] | None = field(default=None, metadata=_json(optional=True))


@dataclass(frozen=True, slots=True)
class CommOverlapExtra:
    """COMM001: the NCCL time, the part no compute overlapped, the overlapped share and whether any compute ran. In a
    multi-rank run the run-level step (``analysis.run.waiting.waiting_apart``) adds the waiting for the last rank
    taken off the impact and the exposed time before it (no compute), or the waiting the NCCL time may hold."""

    comm_ns: int
    comm_exposed_ns: int
    overlap_pct: float
    has_compute: bool
    waiting_ns: int | None = field(default=None, metadata=_json(optional=True, run_step=True))
    exposed_with_waiting_ns: int | None = field(default=None, metadata=_json(optional=True, run_step=True))
    waiting_up_to_ns: int | None = field(default=None, metadata=_json(optional=True, run_step=True))


@dataclass(frozen=True, slots=True)
class StragglerExtra:
    """COMM002: per participant, how often it arrived last, its skew then and its wait; the matched collectives and the
    wait the straggler imposed on the others (summed over ranks)."""

    participants: Mapping[str, Mapping[str, int]]
    matched_collectives: int
    wait_imposed_ns: int


@dataclass(frozen=True, slots=True)
class CollectiveExtra:
    """COMM003. With message sizes: the slow size classes (``groups``), the communicator's size and where it was read,
    whether the traffic crosses nodes, the NCCL kernels without a size. Without (``sizes`` is ``by kernel``): the
    NCCL kernel time per collective, algorithm and protocol (``groups``, completed with every rank's share in a
    multi-rank run), their total, and this rank's network sends when NCCL's network ranges record them."""

    sizes: str | None = field(default=None, metadata=_json(optional=True))
    groups: list[Mapping[str, Any]] = field(default_factory=list)
    ranks_n: int | None = field(default=None, metadata=_json(optional=True))
    ranks_source: str | None = field(default=None, metadata=_json(optional=True))
    inter_node: bool | None = field(default=None, metadata=_json(optional=True))
    kernels_without_size: int | None = field(default=None, metadata=_json(optional=True))
    nccl_time_ns: int | None = field(default=None, metadata=_json(optional=True))
    network: Mapping[str, Any] | None = field(default=None, metadata=_json(optional=True))


@dataclass(frozen=True, slots=True)
class SerializedCommExtra:
    """COMM004: per (process, device), the NCCL time with no compute beside it, the NCCL time, kernels and streams."""

    devices: list[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class LateNodeExtra:
    """COMM005: the late host, the collectives it was late in of those matched, its lateness (``min``, ``max``,
    ``median_gap``), each of its ranks' cost, and the clocks compared (source, uncertainty, whether the skew is below
    it)."""

    host: str
    late_in: int
    matched_collectives: int
    lateness_ns: Mapping[str, int]
    per_rank: list[Mapping[str, Any]]
    clock: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CopyBoundExtra:
    """MEM005: the time only copies ran, the main copy direction, each direction's copies and time, per device; the
    link throughput sampled while the main direction's copies ran, when GPU metrics were collected."""

    memory_only_ns: int
    main_direction: str
    directions: Mapping[str, Mapping[str, Any]]
    devices: list[Mapping[str, Any]]
    measured_link: list[Mapping[str, Any]] | None = field(default=None, metadata=_json(optional=True))


class NetSettingsFacts(TypedDict):
    """NET005: the settings forced by the environment or the net plugin, name -> value (None: the plugin's)."""

    settings: dict[str, str | None]


class NetFailureFacts(TypedDict):
    """NET006: the first WARN of the failing rank (kind, line, rank, NIC), the ranks that logged it, their peers."""

    root_kind: str
    root_line: int
    root_rank: int | None
    nic: str | None
    failing_ranks: list[int]
    peers: list[int]


class NetBandwidthFacts(TypedDict):
    """NET007: nccl-tests' peak busbw (GB/s), the link it is compared with, and whether the log printed that speed."""

    peak_busbw: float
    link_gbs: float
    link_printed: bool


class NetRailsFacts(TypedDict):
    """NET003: each rail problem found (a NIC shared, traffic across rails, a GPU off its closest NIC)."""

    problems: list[str]


class NetSocketsFacts(TypedDict):
    """NET001: the inter-node pairs over sockets, whether the environment asked for it, the RDMA NICs listed."""

    pairs: int
    on_purpose: bool
    rdma_nics: list[str]


class NetGdrFacts(TypedDict):
    """NET002: the inter-node pairs without GPUDirect RDMA and the reasons the log gives."""

    pairs: int
    reasons: list[str]


class NetShmFacts(TypedDict):
    """NET004: the intra-node pairs through host memory, whether P2P was disabled, whether NVLink exists."""

    pairs: int
    p2p_disabled: bool
    nvlink: bool


class NetPcieFacts(TypedDict):
    """NET004: the intra-node P2P pairs and the PCIe/CPU path the graph search settled on, where NVLink exists."""

    pairs: int
    path: str | None


class NetChannelsFacts(TypedDict):
    """NET004: the channels the communicator runs and about how many the graph search's rings give."""

    channels: int
    expected: int


# What a NET rule read in the log, one closed shape per kind of finding.
NetFacts = (NetSettingsFacts | NetFailureFacts | NetBandwidthFacts | NetRailsFacts | NetSocketsFacts | NetGdrFacts
            | NetShmFacts | NetPcieFacts | NetChannelsFacts)


@dataclass(frozen=True, slots=True)
class NetExtra:
    """Every NET rule (``analysis.diagnosis.rules.nccl.common.NetRule.finding``): what the rule read in the NCCL log,
    under ``nccl`` (one of the ``Net*Facts`` shapes: pairs, NICs, settings, failure lines ...); absent when the rule
    records nothing beyond its evidence."""

    nccl: NetFacts | None = field(default=None, metadata=_json(optional=True))


@dataclass(frozen=True, slots=True)
class NcuExtra:
    """Every NCU rule (``analysis.diagnosis.rules.ncu.common``): the estimated speedup, the kernel and its launch shape
    (lists, or ncu's total sizes), its nsys link and time base; the shares of one kernel's findings
    (``analysis.diagnosis.ncu_gains``) where the kernel's time is known."""

    speedup_pct: float
    speedup_type: str
    kernel: str
    linked_to_nsys: bool
    nsys_match: str | None
    kernel_grid: list[int] | int | None
    kernel_block: list[int] | int | None
    kernel_time_ns: int | None
    # Each launch's saving bounded by its speed of light, ``[kernel_id, ns]``.
    launch_savings: list[list[int | None]]
    time_base_ns: int | None
    # Set by the gain sharing after the rule (``ncu_gains.share_gains``: the rule leaves them None, and None is left
    # out of the JSON): the rule's own estimate, the kernel's shared saving, the finding's place among the kernel's
    # findings and how many share it, its role, and the causes a symptom is explained by.
    raw_impact_ns: int | None = field(default=None, metadata=_json(optional=True))
    kernel_saving_ns: int | None = field(default=None, metadata=_json(optional=True))
    cause_order: int | None = field(default=None, metadata=_json(optional=True))
    causes_on_kernel: int | None = field(default=None, metadata=_json(optional=True))
    role: str | None = field(default=None, metadata=_json(optional=True))
    explained_by: list[str] | None = field(default=None, metadata=_json(optional=True))


# What a rule's finding carries as its ``extra`` (``analysis.diagnosis.findings.Finding.extra``): its rule's
# ``extra_type``, one of these.
RuleExtra = (SyncExtra | PageableCopyExtra | BlockingCopyExtra | MemsetExtra | MigrationExtra | WarmupExtra
             | LaunchShapeExtra | DominantKernelExtra | IdleGapsExtra | LowUtilizationExtra | LaunchBoundExtra
             | TensorCoreExtra | DurationOutlierExtra | OsBlockedExtra | HostSamplesExtra | HostCommExtra | JitExtra
             | AllocationExtra | StartupExtra | CommOverlapExtra | StragglerExtra | CollectiveExtra | SerializedCommExtra
             | LateNodeExtra | CopyBoundExtra | NetExtra | NcuExtra)


def extra_json(extra: Any, *, run_step: bool | None = None) -> JSON:
    """A rule's typed extra (its ``Rule.extra_type``, made by the rule) as the finding's ``extra``: its fields
    in declared order (the order of the keys in the JSON), values as given; an optional field (``_json(optional=True)``)
    left out while it is None. ``run_step``: only the fields the run step sets (True) or only the others (False)."""
    if not dataclasses.is_dataclass(extra) or isinstance(extra, type):
        raise TypeError(f"a typed extra is a dataclass instance, not {type(extra).__name__}")
    return {f.name: value for f in dataclasses.fields(extra)
            if (run_step is None or bool(f.metadata.get("json", {}).get("run_step")) == run_step)
            and ((value := getattr(extra, f.name)) is not None or not f.metadata.get("json", {}).get("optional"))}



@dataclass(frozen=True, slots=True)
class RuleStatus:
    """How one rule went on the run: ``ok``, ``skipped`` (with the reason) or ``error``."""

    rule_id: str = field(metadata=_json(key="id"))
    status: str
    reason: str | None = None
    findings: int = 0

    def to_json(self) -> JSON:
        return {"id": self.rule_id, "status": self.status, "reason": self.reason, "findings": self.findings}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuleStatus:
        return cls(rule_id=data["id"], status=data["status"], reason=data["reason"], findings=data["findings"])


@dataclass(frozen=True, slots=True)
class DeviceBreakdown:
    """The partition of one (process, device)'s GPU-active span (see ``analysis.diagnosis.breakdown``)."""

    pid: int | None
    device: int | None
    start_ns: int
    end_ns: int
    compute_ns: int
    comm_overlapped_ns: int
    comm_exposed_ns: int
    memory_only_ns: int
    idle_ns: int
    span_ns: int
    rank: int | None
    goodput_pct: float

    def to_json(self) -> JSON:
        return {"pid": self.pid, "device": self.device, "start_ns": self.start_ns, "end_ns": self.end_ns,
                "compute_ns": self.compute_ns, "comm_overlapped_ns": self.comm_overlapped_ns,
                "comm_exposed_ns": self.comm_exposed_ns, "memory_only_ns": self.memory_only_ns,
                "idle_ns": self.idle_ns, "span_ns": self.span_ns, "rank": self.rank,
                "goodput_pct": self.goodput_pct}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeviceBreakdown:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where a report's GPU time goes: the device partitions and their sums (``analysis.diagnosis.breakdown``).

    ``compute_ns + comm_exposed_ns + memory_only_ns + idle_ns == span_ns``."""

    compute_ns: int
    comm_overlapped_ns: int
    comm_exposed_ns: int
    memory_only_ns: int
    idle_ns: int
    span_ns: int
    goodput_pct: float
    rank: int | None
    devices: tuple[DeviceBreakdown, ...]

    def to_json(self) -> JSON:
        return {"compute_ns": self.compute_ns, "comm_overlapped_ns": self.comm_overlapped_ns,
                "comm_exposed_ns": self.comm_exposed_ns, "memory_only_ns": self.memory_only_ns,
                "idle_ns": self.idle_ns, "span_ns": self.span_ns, "goodput_pct": self.goodput_pct,
                "rank": self.rank, "devices": [d.to_json() for d in self.devices]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Breakdown:
        return cls(**{**data, "devices": tuple(DeviceBreakdown.from_json(d) for d in data["devices"])})


@dataclass(frozen=True, slots=True)
class ReportWindow:
    """The part of a report the rules and headline numbers looked at (``analysis.loops.window``)."""

    spec: str
    phase: str
    reason: str | None
    start_ns: int | None
    end_ns: int | None

    def to_json(self) -> JSON:
        return {"spec": self.spec, "phase": self.phase, "reason": self.reason, "start_ns": self.start_ns,
                "end_ns": self.end_ns}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReportWindow:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What bounds a run (or one report) and what to do first: one sentence with a cost and a next step
    (``analysis.diagnosis.verdict``). ``kind`` is one of ``analysis.diagnosis.verdict.KINDS``; ``rule_id`` the finding the
    verdict speaks for (None: it is about the report as a whole)."""

    kind: str
    text: str
    impact_ns: int | None
    next_step: str
    rule_id: str | None

    def to_json(self) -> JSON:
        return {"kind": self.kind, "text": self.text, "impact_ns": self.impact_ns, "next_step": self.next_step,
                "rule_id": self.rule_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(**data)


# The typed keys of a report summary, each with how it is read from JSON; every other key is kept, in its
# place, in ``details``.
_TYPED: dict[str, Callable[[Any], Any]] = {
    "top_kernels": lambda v: tuple(top_kernel_from_json(k) for k in v),
    "dominant_kernel": DominantKernel.from_json,
    "system_metrics": SystemMetrics.from_json,
    "breakdown": Breakdown.from_json,
    "nvtx": NvtxSummary.from_json,
    "launches": Launches.from_json,
    "phases": lambda v: tuple(PhaseSpan.from_json(p) for p in v),
    "window": ReportWindow.from_json,
    "idle_anatomy": lambda v: tuple(IdleAnatomy.from_json(a) for a in v),
    "kernels": lambda v: tuple(NcuKernel.from_json(k) for k in v),
    "iterations": Iterations.from_json,
    "network_path": NetworkPath.from_json,
}
_PLAIN = ("file", "tool", "host", "rank")


def _part_json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, tuple):
        return [v.to_json() for v in value]
    return value.to_json()


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """One report of the run: its headline facts (``analysis.diagnosis.summary``), breakdown, loop and window.

    The typed parts are None when the report has not the key (an ncu report has no ``phases`` ...).
    ``details`` holds the other keys, those that depend on the tool or still change shape
    (``network``, ``counts`` ...), as JSON; ``keys`` is the JSON's key order (read from JSON; a
    summary made in code leaves it empty and gets the headline keys first)."""

    file: str
    tool: str
    host: str | None = field(default=None, metadata=_json(optional=True))
    rank: int | None = field(default=None, metadata=_json(optional=True))
    top_kernels: tuple[TopKernel | KernelTotal, ...] | None = field(default=None, metadata=_json(optional=True))
    dominant_kernel: DominantKernel | None = field(default=None, metadata=_json(optional=True))
    system_metrics: SystemMetrics | None = field(default=None, metadata=_json(optional=True))
    breakdown: Breakdown | None = field(default=None, metadata=_json(optional=True))
    nvtx: NvtxSummary | None = field(default=None, metadata=_json(optional=True))
    launches: Launches | None = field(default=None, metadata=_json(optional=True))
    phases: tuple[PhaseSpan, ...] | None = field(default=None, metadata=_json(optional=True))
    window: ReportWindow | None = field(default=None, metadata=_json(optional=True))
    # nsys: where each device's idle went, per phase and category.
    idle_anatomy: tuple[IdleAnatomy, ...] | None = field(default=None, metadata=_json(optional=True))
    # ncu: each profiled kernel, its memory story and the findings on it.
    kernels: tuple[NcuKernel, ...] | None = field(default=None, metadata=_json(optional=True))
    # nsys: the loop, its iterations and step anatomy.
    iterations: Iterations | None = field(default=None, metadata=_json(optional=True))
    # An NCCL log, the first of its job: the job's network path (the run's, joined, is ``AnalysisResult.network_path``).
    network_path: NetworkPath | None = field(default=None, metadata=_json(optional=True))
    details: Mapping[str, Any] = field(default_factory=dict, metadata=_json(flat=True))
    keys: tuple[str, ...] = field(default=(), repr=False, compare=False, metadata=_json(omit=True))

    def to_json(self) -> JSON:
        out: JSON = {}
        for k in self.keys or self._default_keys():
            if k in _TYPED and k not in self.details:
                out[k] = _part_json(getattr(self, k))
            elif k in _PLAIN:
                out[k] = getattr(self, k)
            else:
                out[k] = self.details[k]
        return out

    def _default_keys(self) -> tuple[str, ...]:
        """The key order of a summary made in code (not read from JSON): the headline first."""
        return ("file", "tool", *(k for k in ("host", "rank") if getattr(self, k) is not None), *self.details,
                *(k for k in _TYPED if getattr(self, k) is not None))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, lenient: bool = False) -> ReportSummary:
        """The summary from its JSON. ``lenient`` (a summary stored by an older version): a typed part that
        does not read as its type stays JSON in ``details`` (its attribute None), so nothing is lost."""
        details = {k: v for k, v in data.items() if k not in _TYPED and k not in _PLAIN}
        typed: dict[str, Any] = {}
        for k, read in _TYPED.items():
            try:
                typed[k] = None if data.get(k) is None else read(data[k])
            except (KeyError, TypeError, ValueError, AttributeError):
                if not lenient:
                    raise
                typed[k], details[k] = None, data[k]
        return cls(file=data["file"], tool=data["tool"], host=data.get("host"), rank=data.get("rank"),
                   details=details, keys=tuple(data), **typed)


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """A run's analysis: the window spec, one summary per report (in input order), the findings ranked
    by impact, each selected rule's status, and (multi-rank runs) which rank finished each step last."""

    window: str
    reports: tuple[ReportSummary, ...]
    findings: tuple[FindingResult, ...]
    rules: tuple[RuleStatus, ...]
    steps: Mapping[str, Any] | None = field(default=None, metadata=_json(optional=True))
    # Multi-rank runs on their steady windows: the stretch where every rank is steady, in each one's times.
    aligned_window: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=_json(optional=True))
    # A run analyzed without some of its reports (they failed): their names and the ranks they held.
    missing: tuple[Any, ...] | None = field(default=None, metadata=_json(optional=True))
    missing_ranks: tuple[Any, ...] | None = field(default=None, metadata=_json(optional=True))
    # The contract's version; None only for an analysis stored before results carried one.
    schema_version: int | None = field(default=SCHEMA_VERSION, metadata=_json(optional=True))
    # What bounds the run and what to do first (analysis.diagnosis.verdict); None when the run has no nsys report.
    verdict: Verdict | None = field(default=None, metadata=_json(optional=True))
    # NCCL's network transfers as a rank x rank matrix (analysis.model.network), when some report records them.
    network: Mapping[str, Any] | None = field(default=None, metadata=_json(optional=True))
    # Multi-rank runs: each collective's time split into the wait for the last rank and the transfer after
    # it, per rank and per host (analysis.diagnosis.rules.nsys.run_nodes).
    collectives: Mapping[str, Any] | None = field(default=None, metadata=_json(optional=True))
    # The run's NCCL debug log: nodes, ranks, NICs, each pair's transport, rings and trees, settings, warnings
    # (analysis.readers.nccl), and ``joined``: which ranks each nsys report holds. None without a log.
    network_path: RunNetworkPath | None = field(default=None, metadata=_json(optional=True))
    # Multi-report runs: what is missing or does not belong (analysis.run.mixed): missing ranks, duplicate
    # ranks, other jobs, reports apart on the aligned clock. Absent when nothing is wrong.
    run_warnings: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=_json(optional=True))

    def to_json(self) -> JSON:
        # The verdict first: the line an engineer acts on.
        out: JSON = {} if self.verdict is None else {"verdict": self.verdict.to_json()}
        if self.schema_version is not None:
            out["schema_version"] = self.schema_version
        out |= {"window": self.window, "reports": [r.to_json() for r in self.reports],
                     "findings": [f.to_json() for f in self.findings], "rules": [r.to_json() for r in self.rules]}
        if self.steps is not None:
            out["steps"] = self.steps
        if self.aligned_window is not None:
            out["aligned_window"] = list(self.aligned_window)
        if self.missing is not None:
            out["missing"] = list(self.missing)
            out["missing_ranks"] = list(self.missing_ranks or ())
        if self.network is not None:
            out["network"] = self.network
        if self.collectives is not None:
            out["collectives"] = self.collectives
        if self.network_path is not None:
            out["network_path"] = self.network_path.to_json()
        if self.run_warnings:
            out["run_warnings"] = list(self.run_warnings)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnalysisResult:
        def opt(key: str) -> tuple[Any, ...] | None:
            return None if data.get(key) is None else tuple(data[key])

        return cls(window=data["window"], reports=tuple(ReportSummary.from_json(r) for r in data["reports"]),
                   findings=tuple(FindingResult.from_json(f) for f in data["findings"]),
                   rules=tuple(RuleStatus.from_json(r) for r in data["rules"]), steps=data.get("steps"),
                   aligned_window=opt("aligned_window"), missing=opt("missing"), missing_ranks=opt("missing_ranks"),
                   schema_version=data.get("schema_version"),
                   verdict=None if data.get("verdict") is None else Verdict.from_json(data["verdict"]),
                   network=data.get("network"), collectives=data.get("collectives"),
                   network_path=None if data.get("network_path") is None
                   else RunNetworkPath.from_json(data["network_path"]),
                   run_warnings=opt("run_warnings"))
