"""The JSON payloads the views return through ``analysis.api`` (timeline windows, the run timeline, named calls),
as TypedDicts: the pages' and the API's data, typed where they are built and read. Standard library only, so
``analysis.api`` exports them without importing DuckDB.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class BoxTable(TypedDict):
    """A lane's boxes on the wire: the field names once, then one row of values per box (``BOX_FIELDS``)."""

    fields: list[str]
    rows: list[list[Any]]


class LaneInfo(TypedDict):
    """One lane: a GPU stream (``device``, ``stream``), a CUDA API thread or an NVTX thread (``pid`` in one report's
    window, ``tid``, the nesting ``depth``)."""

    id: str
    kind: str
    label: str
    device: NotRequired[int | None]
    stream: NotRequired[int | None]
    pid: NotRequired[int | None]
    tid: NotRequired[int | None]
    depth: NotRequired[int]


class Lane(LaneInfo):
    """A lane of a window, with its boxes."""

    boxes: BoxTable


class Window(TypedDict):
    """A downsampled window of one report (``window``): its extent, the window drawn, the buckets and the lanes, with
    how many boxes and activities they hold (absent for an empty report)."""

    extent: list[int] | None
    start_ns: int
    end_ns: int
    buckets: int
    lanes: list[Lane]
    boxes: NotRequired[int]
    activities: NotRequired[int]


class KernelRun(TypedDict):
    start_ns: int
    end_ns: int
    device: int | None
    stream: int | None


class KernelInstances(TypedDict):
    """Where a kernel ran (``kernel_instances``): how often, its total time and its first runs."""

    count: int
    total_ns: int
    first: list[KernelRun]


class _Process(TypedDict):
    """One profiled process of one report (a rank) in the run's timeline: what the catalogue and a window share."""

    id: str
    report_id: int
    pid: int | None
    rank: int | None
    host: str | None
    devices: list[int]
    label: str


class Group(_Process):
    """A process in the run's lane catalogue (``catalogue``), with its lanes."""

    lanes: list[LaneInfo]


class WindowGroup(_Process):
    """A group in a window of the run (``window``): its report's offset on the run clock and its lanes' boxes."""

    lanes: list[Lane]
    offset_ns: int


class RunWindow(TypedDict):
    """A downsampled window of the run (``window``): the run's extent, the window drawn, whether the reports are
    aligned on one clock, the groups, and how many boxes and activities they hold."""

    extent: list[int] | None
    start_ns: int
    end_ns: int
    buckets: int
    aligned: bool
    groups: list[WindowGroup]
    boxes: int
    activities: int


class NamedCall(TypedDict):
    """One call inside which a device it launches on was idle, clipped to the window."""

    name: str
    start_ns: int
    end_ns: int
    idle_ns: int
    pid: int
    tid: int | None
    device: int | None


class NamedCalls(TypedDict):
    """The calls a finding names that held the GPU idle (``named_calls``): how many, and the longest."""

    count: int
    longest: list[NamedCall]


class CollectiveInstance(TypedDict):
    """One process's instance of a selected NCCL kernel, on the run clock, with its arrival after the first."""

    report_id: int
    pid: int | None
    rank: int | None
    device: int | None
    stream: int | None
    lane_id: str
    start_ns: int
    end_ns: int
    arrival_ns: NotRequired[int]


class LastArrival(TypedDict):
    report_id: int
    pid: int | None
    rank: int | None


class Collective(TypedDict):
    """The same NCCL kernel instance (name, occurrence) in every process that ran it (``run_select.collective``)."""

    name: str
    occurrence: int
    aligned: bool
    instances: list[CollectiveInstance]
    skew_ns: int
    last: LastArrival | None


class SelectedKernel(TypedDict):
    report_id: int
    pid: int | None
    device: int | None
    stream: int | None
    name: str
    category: str | None
    start_ns: int
    end_ns: int
    correlation_id: int | None
    lane_id: str


class SelectedLaunch(TypedDict):
    start_ns: int
    end_ns: int
    name: str | None
    tid: int | None
    lane_id: str


class Selection(TypedDict):
    """What a click on the run timeline selects (``run_select.select``): the kernel, its launch and (NCCL) its
    collective; only ``kernel`` (None) when nothing is there."""

    kernel: SelectedKernel | None
    launch: NotRequired[SelectedLaunch | None]
    collective: NotRequired[Collective | None]


class LaneFile(TypedDict):
    """The lane facts and extent kept beside a report (``run_overview.write_lanes``)."""

    facts: dict[str, list[list[Any]]]
    extent: list[int] | None
