"""Built-in decoding of the nsys enum columns we normalize, with the export's ENUM_* tables preferred.

ENUM tables are absent before 2022.4 and only partly written from 2025.3, so every value we decode
needs a fallback here. The values are CUPTI's and have not changed across versions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# ENUM_CUDA_MEMCPY_OPER / MemcpyOperationStrings (2020) -> analysis.readers.schema.COPY_KINDS
COPY_KIND: dict[int, str] = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM_HtoD", 12: "UVM_DtoH", 13: "UVM_DtoD",
}
# ENUM_CUDA_MEM_KIND -> analysis.readers.schema.MEMORY_KINDS
MEMORY_KIND: dict[int, str] = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed",
    5: "device_static", 6: "managed_static", 7: "unknown",
}
# ENUM_CUPTI_SYNC_TYPE -> analysis.readers.schema.SYNC_TYPES
SYNC_TYPE: dict[int, str] = {0: "unknown", 1: "event", 2: "stream_wait_event", 3: "stream", 4: "context"}

# ENUM_NET_LINK_TYPE (TARGET_INFO_NIC_INFO.linkLayer) -> analysis.readers.schema.LINK_LAYERS
LINK_LAYER: dict[int, str] = {0: "unknown", 1: "ethernet", 2: "infiniband"}



def _snake(name: str) -> str:
    """nsys' CamelCase enum name as one of our words: 'OSRuntime' -> 'os_runtime', 'NonBlocked' -> 'non_blocked'."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


# ENUM_SAMPLING_THREAD_STATE (SCHED_EVENTS.threadState) and ENUM_SCHEDULING_THREAD_BLOCK (.threadBlock), as
# nsys 2024.5-2026.1 list them (later versions append values) -> analysis.readers.schema.THREAD_STATES, THREAD_BLOCKS
_THREAD_STATE_NAMES = ("Unknown", "Running", "Interruptible", "Uninterruptible", "Stopped", "Terminated",
                       "Unscheduled", "Waiting", "OSRuntime", "Initialized", "Transition")
_THREAD_BLOCK_NAMES = (
    "NonBlocked", "Unknown", "SigSuspend", "Stopped", "Nanosleep", "Intr", "Mutex", "CondVar", "Sem", "Join",
    "SigWaitInfo", "WaitCtx", "Send", "Receive", "Reply", "Stack", "WaitThread", "WaitPage", "NetSend", "NetReply",
    "FreePage", "PageIn", "PoolAllocation", "DelayExecution", "Suspended", "UserRequest", "EventPair", "Queue",
    "LPCReceive", "LPCReply", "VirtualMemory", "PageOut", "Rendezvous", "KeyedEvent", "Terminated", "ProcessInSwap",
    "CPURateControl", "WrCalloutStack", "Kernel", "Resource", "PushLock", "WindowsMutex", "QuantumEnd",
    "DispatchInt", "Preempted", "YieldExecution", "FastMutex", "GuardedMutex", "Rundown", "ReadyToRun",
    "AlertByThreadId", "DeferredPreempt", "PhysicalFault", "MqSend", "MqReceive", "MuonMutex", "Barrier",
    "RwlockRead", "RwlockWrite", "TraceBuffer", "InterruptAttachEvent", "TimerDelegate")
THREAD_STATE: dict[int, str] = {i: _snake(n) for i, n in enumerate(_THREAD_STATE_NAMES)}
THREAD_BLOCK: dict[int, str] = {i: _snake(n) for i, n in enumerate(_THREAD_BLOCK_NAMES)}

# The symbolic names of the ENUM tables, mapped onto our vocabulary (suffix after the common prefix).
_ENUM_TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "copy_kind": ("ENUM_CUDA_MEMCPY_OPER", {
        f"CUDA_MEMCPY_KIND_{k.upper()}": k for k in COPY_KIND.values() if k != "unknown"
    } | {"CUDA_MEMCPY_KIND_UNKNOWN": "unknown"}),
    "memory_kind": ("ENUM_CUDA_MEM_KIND", {
        f"CUDA_MEMOPR_MEMORY_KIND_{k.upper()}": k for k in MEMORY_KIND.values()
    }),
    "sync_type": ("ENUM_CUPTI_SYNC_TYPE", {
        "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN": "unknown",
        "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE": "event",
        "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT": "stream_wait_event",
        "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE": "stream",
        "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE": "context",
    }),
    "link_layer": ("ENUM_NET_LINK_TYPE", {"Unknown": "unknown", "Ethernet": "ethernet", "InfiniBand": "infiniband"}),
    "thread_state": ("ENUM_SAMPLING_THREAD_STATE", {n: _snake(n) for n in _THREAD_STATE_NAMES}),
    "thread_block": ("ENUM_SCHEDULING_THREAD_BLOCK", {n: _snake(n) for n in _THREAD_BLOCK_NAMES}),
}
_BUILTIN = {"copy_kind": COPY_KIND, "memory_kind": MEMORY_KIND, "sync_type": SYNC_TYPE, "link_layer": LINK_LAYER,
            "thread_state": THREAD_STATE, "thread_block": THREAD_BLOCK}


def enum_tables() -> dict[str, str]:
    """The export tables that may refine each decoder: decoder name -> ENUM table name."""
    return {key: table for key, (table, _) in _ENUM_TABLES.items()}


def decoders(enum_rows: Mapping[str, list[tuple[int, str]]]) -> dict[str, dict[int, str]]:
    """Value maps per decoder: the built-in map, overridden by the export's ENUM rows we recognise.

    ``enum_rows`` maps an ENUM table name to its (id, name) rows. Unrecognised symbolic names are
    ignored (our vocabulary is fixed; an unknown name must not leak into it).
    """
    out: dict[str, dict[int, str]] = {}
    for key, (table, by_name) in _ENUM_TABLES.items():
        merged = dict(_BUILTIN[key])
        for value, name in enum_rows.get(table, []):
            if isinstance(value, int) and name in by_name:
                merged[value] = by_name[name]
        out[key] = merged
    return out


def case_sql(column: str, mapping: Mapping[int, str], default: str = "unknown") -> str:
    """A SQL CASE expression decoding an integer column; labels come only from our fixed vocabulary."""
    if not all(v.replace("_", "").isalnum() for v in [*mapping.values(), default]):
        raise ValueError("enum labels must be plain words")
    whens = " ".join(f"WHEN {int(k)} THEN '{v}'" for k, v in sorted(mapping.items()))
    return f"(CASE {column} {whens} ELSE '{default}' END)"
