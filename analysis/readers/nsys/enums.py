"""Built-in decoding of the nsys enum columns we normalize, with the export's ENUM_* tables preferred.

ENUM tables are absent before 2022.4 and only partly written from 2025.3, so every value we decode
needs a fallback here. The values are CUPTI's and have not changed across versions.
"""

from __future__ import annotations

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
}
_BUILTIN = {"copy_kind": COPY_KIND, "memory_kind": MEMORY_KIND, "sync_type": SYNC_TYPE, "link_layer": LINK_LAYER}


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
