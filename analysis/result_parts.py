"""The typed parts of a report summary that every nsys (and ncu) report carries in the same shape: the top
kernels, the dominant kernel, the system metrics, the NVTX ranges, the kernel launches and the phases.

Each part's ``to_json()`` writes the keys in the order the analysis has always written them, and
``from_json(x).to_json() == x`` for every part the analysis writes (the JSON text is byte-identical).
``analysis.contract`` generates their JSON Schema from the type hints below; the field metadata
(``analysis.results._json``) says where a key is left out when empty.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

JSON = dict[str, Any]
_T = TypeVar("_T")


def _plain_json(obj: Any) -> JSON:
    """A flat dataclass of scalars as JSON, in field order (an optional field left out when None)."""
    return {f.name: v for f in dataclasses.fields(obj)
            if (v := getattr(obj, f.name)) is not None or not f.metadata.get("json", {}).get("optional")}


def _plain_from(cls: type[_T], data: Mapping[str, Any]) -> _T:
    return cls(**data)


@dataclass(frozen=True, slots=True)
class KernelTotal:
    """One kernel name's launches and time (an ncu report's top kernels: over the profiled launches)."""

    name: str | None
    count: int
    total_ns: int
    median_ns: int

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelTotal:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class TopKernel:
    """One of an nsys report's top kernels by time, with its share of the kernel time (None: no kernel time)."""

    name: str | None
    count: int
    total_ns: int
    median_ns: int
    share_pct: float | None

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TopKernel:
        return _plain_from(cls, data)


def top_kernel_from_json(data: Mapping[str, Any]) -> TopKernel | KernelTotal:
    """An nsys top kernel (it has ``share_pct``) or an ncu one (it has not)."""
    return TopKernel.from_json(data) if "share_pct" in data else KernelTotal.from_json(data)


@dataclass(frozen=True, slots=True)
class DominantKernel:
    """The kernel that takes at least half of the report's kernel time (``analysis.diagnosis.summary.DOMINANT_PCT``)."""

    name: str | None
    count: int
    total_ns: int
    share_pct: float

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DominantKernel:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class GpuMetric:
    """One GPU metric of one sampled source: samples, mean, min, max and the first and last sample times."""

    source: str | None
    metric: str | None
    samples: int
    mean: float
    min: float
    max: float
    first_ns: int
    last_ns: int

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuMetric:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class NicCounter:
    """One NIC port's counter: intervals, the summed value, the time covered and the rate per second."""

    nic: str | int | None
    port: str | int | None
    metric: str | None
    unit: str | None
    intervals: int
    total: float
    covered_ns: int
    per_second: float

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NicCounter:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class Nic:
    """A network interface of the host as nsys listed it."""

    nic_id: int | None
    name: str | None
    link_layer: str | None
    model: str | None
    state: str | None

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Nic:
        return _plain_from(cls, data)


StorageKind = Literal["read", "write", "sync", "async", "copy", "metadata"]


@dataclass(frozen=True, slots=True)
class StorageIO:
    """One process's storage calls of one kind (``analysis.diagnosis.system_metrics.STORAGE_KINDS``) in the OS runtime
    trace: calls, threads, time in the calls and the longest call."""

    pid: int | None
    kind: StorageKind
    calls: int
    threads: int
    total_ns: int
    max_ns: int

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StorageIO:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class SystemMetrics:
    """The report's system metrics (``analysis.diagnosis.system_metrics``): GPU metrics, NIC counters, the NIC
    inventory and storage I/O."""

    gpu: tuple[GpuMetric, ...]
    nic: tuple[NicCounter, ...]
    nics: tuple[Nic, ...]
    storage: tuple[StorageIO, ...]

    def to_json(self) -> JSON:
        return {"gpu": [g.to_json() for g in self.gpu], "nic": [n.to_json() for n in self.nic],
                "nics": [n.to_json() for n in self.nics], "storage": [s.to_json() for s in self.storage]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SystemMetrics:
        return cls(gpu=tuple(GpuMetric.from_json(g) for g in data["gpu"]),
                   nic=tuple(NicCounter.from_json(n) for n in data["nic"]),
                   nics=tuple(Nic.from_json(n) for n in data["nics"]),
                   storage=tuple(StorageIO.from_json(s) for s in data["storage"]))


@dataclass(frozen=True, slots=True)
class NvtxRange:
    """One NVTX range name (domain + text) projected onto the GPU (``analysis.model.nvtx_projection``)."""

    domain: str | None
    text: str | None
    count: int
    cpu_total_ns: int
    gpu_ops: int
    gpu_projected_ns: int
    gpu_op_ns: int

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NvtxRange:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class NvtxSummary:
    """Whether the report has NVTX ranges, and its top ranges by projected GPU time."""

    has_nvtx: bool
    top_ranges: tuple[NvtxRange, ...]

    def to_json(self) -> JSON:
        return {"has_nvtx": self.has_nvtx, "top_ranges": [r.to_json() for r in self.top_ranges]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NvtxSummary:
        return cls(has_nvtx=data["has_nvtx"], top_ranges=tuple(NvtxRange.from_json(r) for r in data["top_ranges"]))


@dataclass(frozen=True, slots=True)
class LaunchKind:
    """The launches of one kind (stream or CUDA graph): calls, kernels, and the median and p90 of the call's
    duration, of the latency from call start to kernel start and of the queue time (``analysis.diagnosis.launches``)."""

    launches: int
    kernels: int
    call_median_ns: int
    call_p90_ns: int
    latency_median_ns: int
    latency_p90_ns: int
    queue_median_ns: int
    queue_p90_ns: int
    # CUDA graphs only (None for stream launches): the GPU time of the work the graph launches ran, and the calls
    # that capture or build and instantiate graphs (cudaStreamBeginCapture ... cudaGraphInstantiate), their count
    # and host time: the set-up cost the replays pay back.
    work_ns: int | None = None
    setup_calls: int | None = None
    setup_ns: int | None = None

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchKind:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class Launches:
    """Kernel launches by kind; ``reason`` says why they are not ``available`` (no CUDA API trace ...)."""

    available: bool
    reason: str | None
    stream: LaunchKind | None
    graph: LaunchKind | None

    def to_json(self) -> JSON:
        return {"available": self.available, "reason": self.reason,
                "stream": None if self.stream is None else self.stream.to_json(),
                "graph": None if self.graph is None else self.graph.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Launches:
        def kind(key: str) -> LaunchKind | None:
            return None if data[key] is None else LaunchKind.from_json(data[key])

        return cls(available=data["available"], reason=data["reason"], stream=kind("stream"), graph=kind("graph"))


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One phase of the report (``startup``, ``warmup``, ``steady``, ``teardown`` or ``whole``; see
    ``analysis.loops.phases``): its time span and why it starts and ends there."""

    name: str
    start_ns: int
    end_ns: int
    reason: str

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseSpan:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class IdleName:
    """One name inside an idle category (a CUDA API call, a host function, a module ...): its time in the
    category's idle and how many calls (or samples) it had there."""

    name: str
    ns: int
    calls: int

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IdleName:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class IdleCategory:
    """One category of a device's idle in a phase (``analysis.diagnosis.idle_anatomy.CATEGORIES``), its time and
    its top names by time."""

    category: str
    ns: int
    top: tuple[IdleName, ...]

    def to_json(self) -> JSON:
        return {"category": self.category, "ns": self.ns, "top": [t.to_json() for t in self.top]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IdleCategory:
        return cls(category=data["category"], ns=data["ns"], top=tuple(IdleName.from_json(t) for t in data["top"]))


@dataclass(frozen=True, slots=True)
class IdleAnatomy:
    """Where one (process, device)'s GPU idle went in one phase (``analysis.diagnosis.idle_anatomy``): its idle, the
    host threads that launch its work (None: not known), and the idle's categories by time. The
    categories' ``ns`` sum to ``idle_ns``; a device's ``idle_ns`` over its phases to its breakdown's."""

    pid: int | None
    device: int | None
    phase: str
    idle_ns: int
    threads: tuple[int, ...] | None
    categories: tuple[IdleCategory, ...]

    def to_json(self) -> JSON:
        return {"pid": self.pid, "device": self.device, "phase": self.phase, "idle_ns": self.idle_ns,
                "threads": None if self.threads is None else list(self.threads),
                "categories": [c.to_json() for c in self.categories]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IdleAnatomy:
        return cls(pid=data["pid"], device=data["device"], phase=data["phase"], idle_ns=data["idle_ns"],
                   threads=None if data["threads"] is None else tuple(data["threads"]),
                   categories=tuple(IdleCategory.from_json(c) for c in data["categories"]))


@dataclass(frozen=True, slots=True)
class KernelCause:
    """A finding on an ncu kernel (``analysis.diagnosis.ncu_gains.annotate_kernels``): its rule, title, the time it
    would save, and its role among the kernel's findings (they share the kernel's time)."""

    rule_id: str
    title: str
    impact_ns: int
    role: str
    severity: str

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelCause:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class NcuKernel:
    """One profiled kernel of an ncu report (``analysis.diagnosis.ncu.kernels``): its launch shape, its ncu duration
    and the nsys time it links to (None: no nsys report of the run has it), the time its findings would
    save, and their causes.

    ``memory`` is the kernel's memory story (``analysis.diagnosis.ncu.memory.story``: ``levels``,
    ``sectors_per_request``, ``bound``, ``roofline``, ``hardware``): an open object, its keys and numbers
    depend on the metrics the report collected and still change shape."""

    kernel_id: int
    name: str
    short_name: str
    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    duration_ns: float | None
    nsys_total_ns: int | None
    nsys_launches: int | None
    memory: Mapping[str, Any]
    estimated_saving_ns: int | None
    causes: tuple[KernelCause, ...]

    def to_json(self) -> JSON:
        return {"kernel_id": self.kernel_id, "name": self.name, "short_name": self.short_name,
                "grid": None if self.grid is None else list(self.grid),
                "block": None if self.block is None else list(self.block), "duration_ns": self.duration_ns,
                "nsys_total_ns": self.nsys_total_ns, "nsys_launches": self.nsys_launches, "memory": self.memory,
                "estimated_saving_ns": self.estimated_saving_ns, "causes": [c.to_json() for c in self.causes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NcuKernel:
        def shape(key: str) -> tuple[int, ...] | None:
            return None if data[key] is None else tuple(data[key])

        return cls(kernel_id=data["kernel_id"], name=data["name"], short_name=data["short_name"], grid=shape("grid"),
                   block=shape("block"), duration_ns=data["duration_ns"], nsys_total_ns=data["nsys_total_ns"],
                   nsys_launches=data["nsys_launches"], memory=data["memory"],
                   estimated_saving_ns=data["estimated_saving_ns"],
                   causes=tuple(KernelCause.from_json(c) for c in data["causes"]))


def _value_json(value: Any) -> Any:
    """A typed value as JSON: parts by their ``to_json``, tuples as lists, the rest as it is."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple):
        return [_value_json(v) for v in value]
    return value


def _keyed_json(obj: Any, keys: tuple[str, ...], details: Mapping[str, Any]) -> JSON:
    """An object with typed fields and open ``details`` as JSON, in ``keys`` order (read from JSON; empty for
    one made in code: the typed fields that are set, then the details)."""
    typed = [f.name for f in dataclasses.fields(obj) if f.name not in ("details", "keys")]
    order = keys or (*(k for k in typed if getattr(obj, k) is not None), *details)
    return {k: details[k] if k in details else _value_json(getattr(obj, k)) for k in order}


def _keyed_from(cls: Callable[..., _T], data: Mapping[str, Any], read: Mapping[str, Any]) -> _T:
    """``cls`` from JSON: each typed key by its reader (absent: None), every other key into ``details``."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in ("details", "keys")]  # type: ignore[arg-type]
    typed = {k: None if data.get(k) is None else read.get(k, _same)(data[k]) for k in names}
    return cls(**typed, details={k: v for k, v in data.items() if k not in names}, keys=tuple(data))


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class LoopSpan:
    """One loop of the report (``analysis.loops.loop_report.loop_list``): its index, whether it is the main one, how it
    was found, its iterations' count and time percentiles, its signature, span, GPU time and trend."""

    index: int
    main: bool
    source: str | None
    count: int
    median_ns: float
    p10_ns: float
    p90_ns: float
    p99_ns: float
    signature: tuple[str, ...]
    start_ns: int
    end_ns: int
    gpu_ns: int
    trend_pct: float | None

    def to_json(self) -> JSON:
        return {**_plain_json(self), "signature": list(self.signature)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoopSpan:
        return cls(**{**data, "signature": tuple(data["signature"])})


@dataclass(frozen=True, slots=True)
class IterationTime:
    """The main loop's iteration-time percentiles, extremes and mean."""

    median_ns: float
    p10_ns: float
    p90_ns: float
    p99_ns: float
    min_ns: int
    max_ns: int
    mean_ns: float

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IterationTime:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class IterationItem:
    """One of the main loop's first iterations: its index, start, end and length."""

    index: int
    start_ns: int
    end_ns: int
    ns: int

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IterationItem:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class StepFigures:
    """One iteration's figures (``analysis.loops.steps``): its phase, span, GPU busy time and the breakdown's partition
    of it (compute, exposed and overlapped communication, memory only, idle). The fields ``StepRecord`` and
    ``SlowStep`` share, first in their JSON."""

    index: int
    phase: str
    start_ns: int
    end_ns: int
    ns: int
    gpu_busy_ns: int
    compute_ns: int
    comm_exposed_ns: int
    comm_overlapped_ns: int
    memory_only_ns: int
    idle_ns: int


def _last_field() -> Any:
    """Multi-rank runs: the rank that finished a step last on the absolute clock, and how long after the first it did
    (``spread_ns``; ``analysis.run.facts.mark_last``); absent in a report analyzed alone."""
    return dataclasses.field(default=None, metadata={"json": {"optional": True}})


@dataclass(frozen=True, slots=True)
class StepRecord(StepFigures):
    """One iteration's exact record (``analysis.loops.steps``): its phase, span, GPU busy time and the breakdown's
    partition of it (compute, exposed and overlapped communication, memory only, idle).

    Those are its ``StepFigures``; in a multi-rank run it also says which rank finished it last."""

    last: str | None = _last_field()
    spread_ns: int | None = _last_field()

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class SlowStep(StepFigures):
    """One of the slowest steps (``analysis.diagnosis.step_anatomy``): its record, its time over the median step, the rule
    that owns that extra time (None: longer GPU work) and the cause in words.

    Its record is its ``StepFigures`` (the fields it shares with ``StepRecord``) and, in a multi-rank run, which rank
    finished it last."""

    extra_ns: int
    owner: str | None
    cause: str
    last: str | None = _last_field()
    spread_ns: int | None = _last_field()

    def to_json(self) -> JSON:
        return _plain_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SlowStep:
        return _plain_from(cls, data)


@dataclass(frozen=True, slots=True)
class StepAnatomy:
    """The step anatomy of the iterations inside the window (``analysis.diagnosis.step_anatomy``): their count, median,
    jitter and GPU duty cycle, the loop's kind (``throughput`` or ``host_paced``), the slowest steps, the
    first records (of ``records_total``). ``details``: what a host-paced loop adds (latency, headroom ...),
    an open object that still changes shape."""

    steady_count: int
    iteration_median_ns: float
    jitter_pct: float | None
    gpu_duty_cycle_pct: float | None
    kind: Literal["throughput", "host_paced"]
    slowest_steps: tuple[SlowStep, ...]
    per_second: float | None
    records: tuple[StepRecord, ...]
    records_total: int
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict, metadata={"json": {"flat": True}})
    keys: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=False,
                                              metadata={"json": {"omit": True}})

    def to_json(self) -> JSON:
        return _keyed_json(self, self.keys, self.details)

    def for_report(self, items: int, loop: int | None = None, iteration_time: IterationTime | None = None,
                   ) -> StepAnatomy:
        """The anatomy as a report holds it: its first ``items`` records (``records_total``: all of them), and under
        ``loop:N`` the loop's index and iteration time last (``details``)."""
        extra = {} if loop is None else {"loop": loop,
                                         "iteration_time": None if iteration_time is None else iteration_time.to_json()}
        return dataclasses.replace(self, records=self.records[:items], records_total=len(self.records),
                                   details={**self.details, **extra}, keys=(*self.keys, *extra))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepAnatomy:
        return _keyed_from(cls, data, {"slowest_steps": lambda v: tuple(SlowStep.from_json(s) for s in v),
                                       "records": lambda v: tuple(StepRecord.from_json(r) for r in v)})


@dataclass(frozen=True, slots=True)
class Iterations:
    """A report's ``iterations``: how its loop was found (``source``: an NVTX range, a kernel signature ...,
    None: no loop, ``reason`` says why), its iteration count and signature, every loop, the program's shape,
    and where there is a loop its iteration-time percentiles, first iterations and step anatomy.

    ``details``: the NVTX step summary's keys (``slowest``, ``wall_*`` ...), the loop's ``detail`` and the
    headline percentiles repeated at the top: open JSON, still changing shape."""

    has_nvtx: bool
    range: str | None
    domain: str | None
    count: int
    source: str | None
    signature: tuple[str, ...]
    reason: str | None
    loops: tuple[LoopSpan, ...]
    program: str
    iteration_time: IterationTime | None = dataclasses.field(default=None, metadata={"json": {"optional": True}})
    items: tuple[IterationItem, ...] | None = dataclasses.field(default=None, metadata={"json": {"optional": True}})
    anatomy: StepAnatomy | None = dataclasses.field(default=None, metadata={"json": {"optional": True}})
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict, metadata={"json": {"flat": True}})
    keys: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=False,
                                              metadata={"json": {"omit": True}})

    def to_json(self) -> JSON:
        return _keyed_json(self, self.keys, self.details)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Iterations:
        return _keyed_from(cls, data, {
            "signature": tuple, "loops": lambda v: tuple(LoopSpan.from_json(lp) for lp in v),
            "iteration_time": IterationTime.from_json, "items": lambda v: tuple(IterationItem.from_json(i) for i in v),
            "anatomy": StepAnatomy.from_json})
