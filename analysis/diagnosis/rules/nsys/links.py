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

from analysis import fmt

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


# Collectives (COMM003): the typical per-GPU peak of the link a collective crosses, per direction, when
# the caller gives none. Inside one node: NVLink of SXM boards by generation (V100 NVLink2 6 x 25 GB/s,
# A100 NVLink3 12 x 25 GB/s, H100/H200 NVLink4 18 x 25 GB/s), the PCIe peak above for other boards.
# Across nodes: one InfiniBand NIC per GPU of the generation's era (EDR 100, HDR 200, NDR 400 Gb/s).
NVLINK_GBPS = {(7, 0): 150.0, (8, 0): 300.0, (9, 0): 450.0, (10, 0): 900.0}
IB_PER_GPU_GBPS = {7: 12.5, 8: 25.0, 9: 50.0, 10: 100.0}


def collective_peak(name: str | None, cc_major: int | None, cc_minor: int | None,
                    inter_node: bool) -> tuple[float | None, str]:
    """The typical link peak (GB/s per direction) a collective of this device is held against, and why."""
    if cc_major is None:
        return None, "unknown: the export does not describe the GPU"
    if inter_node:
        gbps = IB_PER_GPU_GBPS.get(min(max(cc_major, 7), 10))
        if gbps is None:
            return None, f"unknown: no typical InfiniBand figure for compute capability {cc_major}.x"
        return gbps, (f"typical InfiniBand per GPU for compute capability {cc_major}.x "
                      f"({fmt.exact(gbps * 8)} Gb/s), since the ranks are on several nodes")
    nvlink = NVLINK_GBPS.get((cc_major, cc_minor or 0))
    if nvlink and "pcie" not in (name or "").lower():
        return nvlink, f"typical NVLink of an SXM GPU of compute capability {cc_major}.{cc_minor or 0}, per direction"
    peaks = device_peaks(name, cc_major, cc_minor, None)
    return peaks.host_gbps, peaks.host_source
