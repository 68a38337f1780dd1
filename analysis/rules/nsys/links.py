"""The peak bandwidth a copy can reach on each link, from what the export says about the GPU.

nsys exports describe the GPU (``TARGET_INFO_GPU``: name, compute capability, memory bandwidth) but
not its host link: no export in the corpus (nsys 2020 to 2026.2) records the PCIe generation or
width, NVLink or NVLink-C2C. So the host link's peak is a *stated typical* figure by GPU generation,
for an x16 slot, per direction, after 128b/130b encoding (PCIe Gen3 15.75 GB/s, Gen4 31.5 GB/s,
Gen5 63.0 GB/s), NVLink-C2C for Grace superchips (450 GB/s per direction), and none for integrated
GPUs (they share host memory). Device memory's peak is the export's own ``memoryBandwidth``. A
caller may pass the host link's peak instead (``host_link_gbps``), e.g. from ``nvidia-smi -q``.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9  # bandwidths are in GB/s (10^9 bytes per second), as NVIDIA states link and memory peaks

PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}
NVLINK_C2C_GBPS = 450.0
_INTEGRATED = ("tegra", "orin", "xavier", "jetson", "thor")


@dataclass(frozen=True)
class Peaks:
    """Peaks in GB/s (None when unknown) and where each came from, for one device."""

    host_gbps: float | None
    host_source: str
    memory_gbps: float | None  # device memory (read + write of a copy both count against it)


def _pcie_gen(cc_major: int | None, cc_minor: int | None) -> int | None:
    """The PCIe generation NVIDIA ships with each architecture: Hopper (9.x) and later Gen5, Ampere and
    Ada (8.x) Gen4, Volta/Turing (7.x) and Pascal (6.x) Gen3."""
    if cc_major is None:
        return None
    if cc_major >= 9:
        return 5
    if cc_major == 8:
        return 4
    if cc_major >= 6:
        return 3
    return None


def device_peaks(name: str | None, cc_major: int | None, cc_minor: int | None, memory_bps: int | None,
                 host_link_gbps: float = 0.0) -> Peaks:
    """The peaks of one device (see the module docstring)."""
    memory = float(memory_bps) / GB if memory_bps else None
    if host_link_gbps > 0:
        return Peaks(float(host_link_gbps), "given (host_link_gbps)", memory)
    low = (name or "").lower()
    if any(w in low for w in _INTEGRATED):
        return Peaks(None, "integrated GPU: no host link, copies stay in shared memory", memory)
    if "gh200" in low or "gb200" in low or "gb300" in low:
        return Peaks(NVLINK_C2C_GBPS, "typical NVLink-C2C of a Grace superchip, per direction", memory)
    gen = _pcie_gen(cc_major, cc_minor)
    if gen is None:
        return Peaks(None, "unknown: the export does not give the compute capability", memory)
    return Peaks(PCIE_X16_GBPS[gen], f"typical PCIe Gen{gen} x16 for compute capability {cc_major}.x, "
                 "per direction (the export does not record the link)", memory)
