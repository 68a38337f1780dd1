"""The nsys export tables and columns Goodput reads, with the types it accepts: the allow-list of the reader.

Nothing outside this list is ever read from an export. A table not listed here may exist (other tools
add their own); a listed table may be absent (lazy exports). ``required`` columns must exist for the
table to be read at all; the others are read when present and NULL otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

INT, TEXT, REAL = "INTEGER", "TEXT", "REAL"
NUMBER = "NUMBER"  # a measured value nsys declares INTEGER in one version and REAL in another: either is read


@dataclass(frozen=True)
class SourceTable:
    name: str
    columns: dict[str, str]      # column -> expected SQLite type affinity
    required: tuple[str, ...]
    # Of ``required``, the columns without which the table means nothing (event times, string ids). The
    # others every real export has, but a hand-built or filtered one may lack: without them the table is
    # read with that part unknown and the report says so (``meta['degraded']``).
    core: tuple[str, ...] = ()


def _t(name: str, required: str, optional: str = "", texts: str = "", reals: str = "",
       core: str | None = None, numbers: str = "") -> SourceTable:
    text_cols, real_cols, num_cols = set(texts.split()), set(reals.split()), set(numbers.split())
    cols: dict[str, str] = {}
    for col in (required + " " + optional).split():
        cols[col] = TEXT if col in text_cols else REAL if col in real_cols else NUMBER if col in num_cols else INT
    return SourceTable(name, cols, tuple(required.split()), tuple((required if core is None else core).split()))


_ACT = "start end deviceId streamId correlationId globalPid"

SOURCE_TABLES: dict[str, SourceTable] = {t.name: t for t in (
    _t("StringIds", "id value", texts="value"),
    _t("CUPTI_ACTIVITY_KIND_KERNEL", f"{_ACT} demangledName shortName",
       "contextId mangledName registersPerThread gridX gridY gridZ blockX blockY blockZ "
       "staticSharedMemory dynamicSharedMemory graphId", core="start end"),
    _t("CUPTI_ACTIVITY_KIND_MEMCPY", f"{_ACT} bytes copyKind",
       "contextId srcKind dstKind srcDeviceId dstDeviceId", core="start end"),
    _t("CUPTI_ACTIVITY_KIND_MEMSET", f"{_ACT} bytes", "contextId value memKind", core="start end"),
    # CUDA graph replays traced as a whole (nsys profile --cuda-graph-trace=graph, the default): one row per graph
    # launch, its kernels not recorded one by one. Read as GPU work (kernels of category 'graph').
    _t("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", _ACT, "contextId graphId", core="start end"),
    _t("CUPTI_ACTIVITY_KIND_RUNTIME", "start end globalTid correlationId nameId", "eventClass returnValue",
       core="start end"),
    _t("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "start end globalPid syncType",
       "deviceId contextId streamId correlationId eventId", core="start end"),
    _t("NVTX_EVENTS", "start eventType globalTid", "end text textId domainId jsonText binaryData",
       texts="text jsonText binaryData", core="start eventType"),
    # NVTX extended payloads (nsys >= 2024.5 writes the schemas; NCCL >= 2.17 registers them): where in an
    # event's binary payload each named field lies. Read only for NCCL's message sizes and rank counts.
    _t("NVTX_PAYLOAD_SCHEMA_ENTRIES", "domainId schemaId idx name", "offset", texts="name"),
    _t("OSRT_API", "start end globalTid nameId", core="start end"),
    # GPU metrics sampling (nsys profile --gpu-metrics-devices=all, nsys >= 2023.x): one row per sample and
    # metric; TARGET_INFO_GPU_METRICS names the metrics and their source (typeName: the GPU sampled).
    _t("GPU_METRICS", "timestamp typeId metricId value", numbers="value", core="timestamp typeId metricId"),
    _t("TARGET_INFO_GPU_METRICS", "typeId metricId metricName", "typeName", texts="metricName typeName"),
    # NIC metrics (nsys profile --nic-metrics=true): per NIC port, counters over [start, end).
    _t("NET_NIC_METRIC", "start end globalId portId metricsListId metricsIdx value", numbers="value",
       core="start end metricsListId metricsIdx"),
    _t("TARGET_INFO_NETWORK_METRICS", "metricsListId metricsIdx name", "unit", texts="name unit"),
    _t("NIC_ID_MAP", "nicId globalId"),
    _t("TARGET_INFO_NIC_INFO", "nicId name", "stateName deviceId linkLayer", texts="name stateName"),
    _t("ENUM_NET_DEVICE_ID", "id", "label", texts="label"),
    _t("ENUM_NET_LINK_TYPE", "id name", texts="name"),
    # CPU sampling (nsys profile --sample=cpu): one row per sample, its call chain one row per frame.
    _t("COMPOSITE_EVENTS", "id start globalTid", "cpu"),
    _t("SAMPLING_CALLCHAINS", "id symbol stackDepth", "module"),
    # Thread scheduling (nsys profile --cpuctxsw=process-tree, with CPU sampling): a row per switch in or out of
    # a CPU. threadState and threadBlock from 2024.5, decoded by the two ENUM tables (or built-in values).
    _t("SCHED_EVENTS", "start isSchedIn globalTid", "cpu threadState threadBlock"),
    _t("ENUM_SAMPLING_THREAD_STATE", "id name", texts="name"),
    _t("ENUM_SCHEDULING_THREAD_BLOCK", "id name", texts="name"),
    _t("PROFILER_OVERHEAD", "start end globalTid nameId", core="start end"),
    _t("ThreadNames", "nameId globalTid"),
    _t("PROCESSES", "pid name", "globalPid", texts="name"),
    _t("TARGET_INFO_GPU", "name",
       "id cuDevice deviceId uuid busLocation smCount totalMemory memoryBandwidth l2CacheSize clockRate "
       "computeMajor computeMinor maxWarpsPerSm maxBlocksPerSm maxRegistersPerSm maxShmemPerSm",
       texts="name uuid busLocation"),
    _t("TARGET_INFO_CUDA_DEVICE", "gpuId cudaId", "pid"),
    _t("TARGET_INFO_CUDA_GPU", "deviceId name",
       "pid pciBusId numMultiprocessors globalMemorySize globalMemoryBandwidth l2CacheSize coreClockRate "
       "computeCapabilityMajor computeCapabilityMinor maxWarpsPerMultiprocessor maxBlocksPerMultiprocessor "
       "maxRegistersPerMultiprocessor maxSharedMemoryPerMultiprocessor",
       texts="name pciBusId"),
    _t("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"),
    _t("TARGET_INFO_SYSTEM_ENV", "name value", texts="name value"),
    _t("META_DATA_EXPORT", "name value", texts="name value"),
    _t("META_DATA_CAPTURE", "name value", texts="name value"),
    _t("EXPORT_META_DATA", "name value", texts="name value"),
    _t("MemcpyOperationStrings", "id name", texts="name"),
    _t("DomainStrings", "id domainName", texts="domainName"),
    _t("ENUM_CUDA_MEMCPY_OPER", "id name", texts="name"),
    _t("ENUM_CUDA_MEM_KIND", "id name", texts="name"),
    _t("ENUM_CUPTI_SYNC_TYPE", "id name", texts="name"),
)}

# Tables whose presence (with StringIds) marks an SQLite file as an nsys export.
NSYS_MARKERS = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "ThreadNames",
    "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT", "EXPORT_META_DATA",
    "ProcessStreams",
)

# The bulk tables copied by the child process (the rest is small and read during validation).
BULK_TABLES = (
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "OSRT_API",
    "PROFILER_OVERHEAD",
)


def affinity(declared: str | None) -> str:
    """SQLite's type affinity of a declared column type (https://sqlite.org/datatype3.html §3.1)."""
    t = (declared or "").upper()
    if "INT" in t:
        return INT
    if "CHAR" in t or "CLOB" in t or "TEXT" in t:
        return TEXT
    if "REAL" in t or "FLOA" in t or "DOUB" in t:
        return REAL
    return "BLOB" if not t else "NUMERIC"


# What a report loses without a refining column (``SourceTable.required`` minus ``core``), for
# ``meta['degraded']``; by column name, the same meaning in every table that has it.
REFINING_EFFECT = {
    "globalPid": "process ids unknown: its rows are not linked to their API calls and all processes read as one",
    "globalTid": "process and thread ids unknown: its calls are not linked to the GPU work they launched",
    "correlationId": "GPU work and API calls are not linked (launching threads, copy and memset calls unknown)",
    "deviceId": "device unknown: all GPUs of a process read as one",
    "streamId": "streams unknown",
    "demangledName": "full kernel names unknown (short names used)",
    "shortName": "short kernel names unknown",
    "bytes": "sizes unknown",
    "copyKind": "copy directions unknown",
    "nameId": "call names unknown: synchronization, copy and launch calls cannot be recognised",
    "syncType": "synchronization kinds unknown",
}
