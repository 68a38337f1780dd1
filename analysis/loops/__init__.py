"""Loops and phases: iterations from NVTX or kernel patterns, the phases around them, windows."""
