"""The data a warp's global access carries, for NCU001 when ncu did not export bytes per sector.

In order of trust: the SASS data bytes of the accesses (``smsp__sass_data_bytes_mem_global_op_{ld,st}``,
exact: the bytes the instructions asked for), else the element types in the kernel's demangled name
(``kernel<float>(float*, ...)``: an assumption the finding states), else nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analysis.model.ncu_metrics import Launch, Metric

SECTOR_BYTES = 32
WARP = 32
MAX_ACCESS_BYTES = 16  # the widest per-thread global access (128-bit)

# Element types and their size in bytes, as demanglers and ncu spell them.
ELEMENT_BYTES: dict[str, int] = {
    **dict.fromkeys(("bool", "char", "signed char", "unsigned char", "int8_t", "uint8_t", "__nv_fp8_e4m3",
                     "__nv_fp8_e5m2", "c10::Float8_e4m3fn", "c10::Float8_e5m2"), 1),
    **dict.fromkeys(("half", "__half", "__nv_bfloat16", "nv_bfloat16", "c10::Half", "c10::BFloat16", "at::Half",
                     "at::BFloat16", "short", "unsigned short", "int16_t", "uint16_t"), 2),
    **dict.fromkeys(("float", "int", "unsigned int", "int32_t", "uint32_t", "__half2", "half2", "__nv_bfloat162",
                     "char4", "uchar4", "short2", "ushort2"), 4),
    **dict.fromkeys(("double", "long", "unsigned long", "long long", "unsigned long long", "int64_t", "uint64_t",
                     "float2", "int2", "uint2", "short4", "ushort4"), 8),
    **dict.fromkeys(("float4", "int4", "uint4", "double2", "longlong2", "ulonglong2", "long2", "ulong2"), 16),
}
_TYPE = re.compile(r"(?<![\w:])(" + "|".join(re.escape(t) for t in sorted(ELEMENT_BYTES, key=len, reverse=True))
                   + r")(?![\w:])")
# Non-type template arguments print as casts ("(int)128", "(bool)0"): their type is not an element type.
_CAST = re.compile(r"\((?:[\w:]+ ?)+\)(?=-?\d)")
_POINTER_AFTER = re.compile(r"\s*(?:const\s*|volatile\s*|__restrict__\s*)*[*&]")


@dataclass(frozen=True)
class Width:
    """Bytes of useful data per warp request (``ideal`` sectors per request) and where that came from."""

    ideal_sectors_per_request: float
    source: str        # 'sass_bytes' | 'name'
    assumption: str    # what the finding says it assumed ('' when measured)


def from_sass(launch: Launch, op: str) -> Width | None:
    """Exact: the bytes global accesses asked for over the requests that carried them."""
    data = launch.get(Metric((f"smsp__sass_data_bytes_mem_global_op_{op}.sum",
                              f"sm__sass_data_bytes_mem_global_op_{op}.sum")))
    requests = launch.get(Metric((f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum",)))
    if data is None or not requests or data < 0:
        return None
    return Width(data / requests / SECTOR_BYTES, "sass_bytes", "")


def element_types(name: str) -> list[str]:
    """Element types named in a demangled kernel name: template arguments (at any depth) and pointer or
    reference parameters; scalar parameters (sizes, counts) are not data the kernel streams."""
    text = _CAST.sub("", name.replace("(anonymous namespace)", ""))
    depth, params_at, depths = 0, None, []
    for i, ch in enumerate(text):
        depths.append(depth)
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0 and params_at is None and i > 0:
            params_at = i
    found = []
    for m in _TYPE.finditer(text):
        inside_template = depths[m.start()] > 0
        pointer_param = (params_at is not None and m.start() > params_at
                         and _POINTER_AFTER.match(text, m.end()) is not None)
        if inside_template or pointer_param:
            found.append(m.group(1))
    return found


def from_name(launch: Launch) -> Width | None:
    """An assumption: each thread accesses one element of the widest type the kernel's name mentions, in
    full warps (the widest makes the ideal largest, so the excess claimed is the smallest consistent with
    the name)."""
    types = element_types(launch.name or launch.short_name or "")
    if not types:
        return None
    widest = max(types, key=lambda t: ELEMENT_BYTES[t])
    width = min(ELEMENT_BYTES[widest], MAX_ACCESS_BYTES)
    return Width(WARP * width / SECTOR_BYTES, "name",
                 f"assuming {width}-byte accesses (the element type {widest} in the kernel's name)")


def ideal_per_request(launch: Launch, op: str, per_request: float, bytes_per_sector: float | None) -> Width:
    """The ideal sectors per global request of ``op`` ('ld'/'st'): the one inference NCU001 and the memory
    story share. ncu's useful bytes per sector first (exact), then the SASS data bytes, then the element
    type in the kernel's name (an assumption), else the widest access (16 B: a lower bound on the excess)."""
    if bytes_per_sector is not None:
        return Width(per_request * bytes_per_sector / SECTOR_BYTES, "bytes_per_sector", "")
    width = from_sass(launch, op) or from_name(launch)
    if width is not None:
        return width
    return Width(WARP * MAX_ACCESS_BYTES / SECTOR_BYTES, "widest_access",
                 "against the widest (16-byte) accesses, so at least this much")
