"""The idle painting's sweep: one compiled pass over the idle parts and the covering intervals.

``sweep`` walks the idle parts (disjoint, in time order) and the covering intervals (sorted by start)
together. Per category it keeps, of the intervals started so far, the one reaching furthest (the later one
on a tie): the category covers an instant when that end lies ahead, and that interval names it. An instant
goes to the most specific covering category (the lowest code), else to ``none``. The walk stops at each
part's end, at each interval's start and where the covering interval of the winning category ends, so its
steps are the painted stretches, and each is accounted for at once:

* ``ns[bin, category]`` += its length;
* when ``take[bin, category]`` (a rule claims it): ``taken[piece]`` += its length, else when the piece is
  long (``long[piece]``): ``long_ns[category]`` += its length;
* per (bin, slot), the slot being the (category, name) of the naming interval: its length, and one call the
  first time that interval paints (``counted``, updated, carries that across calls). Slots are met in time
  order, so a (bin, slot) total is complete when the slot next appears in a later bin: it is then written
  out as a record, the rest at the end. There are as many records as distinct (bin, slot) pairs painted,
  however many stretches.

Work: linear in parts, intervals and stretches (times the categories for the winner's search). It is C
(``_sweep.c``, built with the package by ``setup.py``, called through ctypes): the NumPy passes it replaced
(one cover and one list rebuild per category, a sort per category for the names) cost about 20 times more
at 10M kernels, and a JIT compiler would cost more memory (LLVM) and start-up than the walk itself.
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import cache

import numpy as np

_I64 = ctypes.POINTER(ctypes.c_int64)
_U8 = ctypes.POINTER(ctypes.c_uint8)


@cache
def _library() -> ctypes.CDLL:
    spec = importlib.util.find_spec("analysis.diagnosis._sweep")
    if spec is None or not spec.origin:
        raise ImportError("analysis.diagnosis._sweep is not built: install the package (pip install -e ., a C "
                          "compiler needed) to build it")
    lib = ctypes.CDLL(spec.origin)
    fn = lib.goodput_sweep
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64, _I64, _I64, _I64, _I64,
                   ctypes.c_int64, _I64, _I64, _U8, _I64,
                   ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   _U8, _U8, _U8, _I64, _I64, _I64, _I64, ctypes.c_int64]
    return lib


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _ptr(a: np.ndarray | None, kind):
    return None if a is None else a.ctypes.data_as(kind)


def record_rows(parts: int, intervals: int, bins: int, nslots: int) -> int:
    """Room enough for the records: one per (bin, slot) pair painted, and no more than the walk's steps (each
    ends at a part's end, an interval's start or an interval's end, each reached once)."""
    return max(1, min(bins * nslots, parts + 2 * intervals))


def sweep(fs: np.ndarray, fe: np.ndarray, fbin: np.ndarray, fpiece: np.ndarray, s: np.ndarray, e: np.ndarray,
          cat: np.ndarray, slot: np.ndarray, nslots: int, none_code: int, take: np.ndarray | None,
          long_: np.ndarray | None, counted: np.ndarray, ns_out: np.ndarray, taken_out: np.ndarray,
          long_out: np.ndarray) -> np.ndarray:
    """See the module docstring. ``fs, fe, fbin, fpiece``: the idle parts in time order, each with its bin and
    piece; ``s, e, cat, slot``: the intervals sorted by start (ties in the given order); ``counted``: bool per
    interval (updated in place); ``take``: (bins, categories) bool or None; ``long_``: bool per piece or None;
    ``ns_out`` (bins, categories), ``taken_out`` (per piece) and ``long_out`` (per category), int64, are added
    to. Returns the records, rows of (bin, slot, ns, calls)."""
    bins, ncat = ns_out.shape
    n = len(s)
    # The C walk trusts its indices: check them here (cheap next to the walk).
    if not (len(fe) == len(fbin) == len(fpiece) == len(fs) and len(e) == len(cat) == len(slot) == len(counted) == n):
        raise ValueError("sweep: array lengths differ")
    if ns_out.dtype != np.int64 or not ns_out.flags.c_contiguous or long_out.shape != (ncat,) \
            or long_out.dtype != np.int64 or taken_out.dtype != np.int64 or counted.dtype != np.bool_ \
            or not counted.flags.c_contiguous:
        raise ValueError("sweep: output arrays must be contiguous int64 (counted: bool)")
    if n and (int(cat.max()) >= ncat or int(slot.min()) < 0 or int(slot.max()) >= nslots):
        raise ValueError("sweep: category or slot out of range")
    if len(fs) and (int(fbin.min()) < 0 or int(fbin.max()) >= bins or int(fpiece.min()) < 0 or not 0 <= none_code < ncat):
        raise ValueError("sweep: bin out of range")
    if take is not None:
        take = np.ascontiguousarray(take, dtype=np.bool_)
        if take.shape != (bins, ncat) or (len(fs) and int(fpiece.max()) >= len(taken_out)):
            raise ValueError("sweep: take does not match the bins or pieces")
    if long_ is not None:
        long_ = np.ascontiguousarray(long_, dtype=np.bool_)
        if len(fs) and int(fpiece.max()) >= len(long_):
            raise ValueError("sweep: long does not match the pieces")
    if not taken_out.flags.c_contiguous or not long_out.flags.c_contiguous:
        raise ValueError("sweep: output arrays must be contiguous")
    rec = np.empty((record_rows(len(fs), n, bins, nslots), 4), dtype=np.int64)  # untouched rows take no memory
    keep = [_i64(a) for a in (fs, fe, fbin, fpiece, s, e, slot)]
    fs_, fe_, fbin_, fpiece_, s_, e_, slot_ = keep
    cat_ = np.ascontiguousarray(cat, dtype=np.uint8)
    got = _library().goodput_sweep(
        len(fs), _ptr(fs_, _I64), _ptr(fe_, _I64), _ptr(fbin_, _I64), _ptr(fpiece_, _I64),
        n, _ptr(s_, _I64), _ptr(e_, _I64), _ptr(cat_, _U8), _ptr(slot_, _I64),
        nslots, ncat, none_code, _ptr(take, _U8), _ptr(long_, _U8), _ptr(counted.view(np.uint8), _U8),
        _ptr(ns_out, _I64), _ptr(taken_out, _I64), _ptr(long_out, _I64), _ptr(rec, _I64), len(rec))
    if got < 0:
        raise MemoryError("sweep: out of memory") if got == -2 else RuntimeError("sweep: record room exceeded")
    return rec[:got]
