"""The colours the run page draws categories with, in one place: each idle-anatomy category
(``analysis.api.IDLE_CATEGORIES``) has its own (``tests/web/test_palette.py`` fails when one has none)."""

from __future__ import annotations

UNKNOWN = "#999"  # a category stored by a newer analysis than this page knows


class Palette(dict[str, str]):
    """Category -> colour; a category without one reads as ``UNKNOWN``."""

    def __missing__(self, key: str) -> str:
        return UNKNOWN


# What the host was doing while the GPU idled (``reports[].idle_anatomy``), most specific first.
IDLE_PALETTE = Palette({
    "allocation": "#d62728", "sync": "#ff7f0e", "sync_copy": "#e7ba52", "memset": "#bcbd22", "launch": "#2ca02c",
    "jit_module": "#9467bd", "nccl_setup": "#8c564b", "cuda_other": "#98df8a", "mpi": "#17becf", "os_io": "#1f77b4",
    "os_wait": "#aec7e8", "os_other": "#c5b0d5", "user_range": "#f7b6d2", "host_cpu": "#7f7f7f", "off_cpu": "#c7c7c7",
    "uvm_migration": "#ff9896", "none": "#e5e5e5",
})
