"""MEM005: copy-bound devices, memory-only time with per-direction bytes, bandwidth and link peaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, load_sql, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.links import Peaks, device_peaks
from analysis.diagnosis.system_metrics import link_during_copies
from analysis.model.activity import UnitOps, top_order, union_ns, unit_ops
from analysis.model.intervals import MEMORY
from analysis.model.trace import Run, Trace
from analysis.results import CopyBoundExtra

# Direction codes of copybound.sql.
DIRECTIONS = ("HtoD", "DtoH", "DtoD", "peer", "memset", "other", "UVM")
# The copy kinds of a direction whose link the GPU metrics measure (PCIe/C2C to the host, NVLink to peers).
MEASURED_KINDS = {"HtoD": ["HtoD"], "DtoH": ["DtoH"], "peer": ["PtoP", "DtoD"]}
HOST = (0, 1)

ADVICE = {
    "latency": ("Most of this time is in small copies, each paying a fixed cost of several microseconds: "
                "pack small tensors into one pinned buffer and copy once, batch them (cudaMemcpyBatchAsync, "
                "CUDA 12.8+), or keep the small state resident on the GPU."),
    "saturated": ("The link runs near its peak, so only moving fewer bytes helps: keep data resident on the "
                  "GPU (cache the dataset or weights in device memory), send lower-precision or compressed "
                  "data and decode on the GPU, and overlap the rest with compute (cudaMemcpyAsync from pinned "
                  "memory on a side stream, prefetch the next batch); for file-fed pipelines read straight "
                  "into GPU memory with GPUDirect Storage (cuFile, KvikIO, DALI)."),
    "slow": ("The copies run well below the link's peak: check that host buffers are pinned, that the GPU's "
             "link trains at full generation and width (nvidia-smi -q, section 'GPU Link Info') and that the "
             "process runs on the GPU's NUMA node (nvidia-smi topo -m); then overlap copies with compute on a "
             "side stream."),
    "device": ("Device-to-device copies and memsets: avoid them (views and in-place ops instead of "
               ".contiguous()/.clone(), no per-step zeroing of buffers that are overwritten anyway) or fuse "
               "them into the kernels that produce the data."),
    "peer": ("Peer copies: run them between GPUs joined by NVLink (nvidia-smi topo -m), enable peer access "
             "(cudaDeviceEnablePeerAccess), and overlap them with compute on a side stream."),
}


class CopyDirection(TypedDict):
    """One copy direction of MEM005's finding (``DirStats.to_dict``): copies, bytes, time, achieved and peak
    bandwidth, the small copies, whether latency or bandwidth bounds it, and the copies other rules own."""

    count: int
    bytes: int
    time_ns: int
    gbps: float | None
    peak_gbps: float | None
    peak_source: str
    pct_of_peak: float | None
    small_copies: int
    small_time_ns: int
    bound: str
    owned_by_mem001_or_mem004: int


class CopyBoundDevice(TypedDict):
    """One copy-bound device of MEM005's finding: its span, memory-only time (and share) and the part MEM005 owns."""

    pid: int | None
    device: int | None
    span_ns: int
    memory_only_ns: int
    mem005_ns: int
    memory_only_pct: float


@dataclass
class DirStats:
    count: int = 0
    bytes: int = 0
    time_ns: int = 0
    small: int = 0
    small_time_ns: int = 0
    elsewhere: int = 0
    peak_gbps: float | None = None
    peak_source: str = ""

    def add(self, dur: np.ndarray, nbytes: np.ndarray, small: np.ndarray, elsewhere: np.ndarray) -> None:
        self.count += len(dur)
        self.bytes += int(nbytes.sum())
        self.time_ns += int(dur.sum())
        self.small += int(small.sum())
        self.small_time_ns += int(dur[small].sum())
        self.elsewhere += int(elsewhere.sum())

    def gbps(self) -> float | None:
        return self.bytes / self.time_ns if self.time_ns else None  # B/ns == GB/s

    def bound(self) -> str:
        return "latency" if 2 * self.small_time_ns >= self.time_ns else "bandwidth"

    def to_dict(self) -> CopyDirection:
        bw = self.gbps()
        return {"count": self.count, "bytes": self.bytes, "time_ns": self.time_ns,
                "gbps": None if bw is None else round(bw, 3), "peak_gbps": self.peak_gbps,
                "peak_source": self.peak_source,
                "pct_of_peak": round(100 * bw / self.peak_gbps, 1) if bw and self.peak_gbps else None,
                "small_copies": self.small, "small_time_ns": self.small_time_ns, "bound": self.bound(),
                "owned_by_mem001_or_mem004": self.elsewhere}


def _peaks(trace: Trace, host_link_gbps: float) -> dict[tuple[int | None, int | None], Peaks]:
    """Peaks per (pid, device) of the devices table; a NULL pid applies to every process."""
    rows = trace.sql("SELECT pid, device, name, cc_major, cc_minor, memory_bandwidth_bps FROM devices")
    return {(r[0], r[1]): device_peaks(r[2], r[3], r[4], r[5], host_link_gbps) for r in rows}


def _peak_for(peaks: dict, pid: int | None, device: int | None) -> Peaks | None:
    return peaks.get((pid, device)) or peaks.get((None, device))


def _memory_ops(trace: Trace, units: list[UnitOps]) -> dict[str, np.ndarray]:
    values = ", ".join(f"({i}, {'NULL' if u.pid is None else int(u.pid)}, "
                       f"{'NULL' if u.device is None else int(u.device)})" for i, u in enumerate(units))
    d = trace.arrays(load_sql("copybound.sql").replace("{units}", values))
    order = np.lexsort((d["end_ns"], d["start_ns"], d["unit"]))  # the units' (start, end) order
    return {k: v[order] for k, v in d.items()}


class CopyBound(Rule):
    """Copy-bound devices: copies and memsets with no kernel beside them take a large share of the time.

    *Why it matters*: while only copies run, the GPU's arithmetic units wait. A step that moves 50 GB
    over a 27 GB/s link spends almost two seconds doing nothing else; whether the fix is to move fewer
    bytes, to move them in fewer pieces or to hide them under compute depends on the direction, the
    copy sizes and how close the copies come to the link's peak.

    *How it is detected*: per process and device, the memory-only time of the breakdown (copies or
    memsets run, no kernel runs: union lengths, so concurrent copies count once). A device is
    copy-bound when that time is at least ``min_share_pct`` of its active span (the window the rule
    runs on). Per direction (HtoD, DtoH, DtoD, peer: ``PtoP`` or a DtoD copy between two devices,
    memset, other) the rule reports count, bytes, summed copy time and achieved bandwidth (bytes over
    summed copy time: each copy's own rate, weighted by its time), against the link's peak:
    device memory bandwidth from the export (halved for DtoD, which reads and writes every byte), the
    host link's typical peak by GPU generation (the export does not record PCIe generation or width;
    see ``analysis.diagnosis.rules.nsys.links``) or ``host_link_gbps`` when given; peer links are unknown to the
    export. A direction is *latency-bound* when at least half its time is in copies under
    ``small_copy_kib``, else *bandwidth-bound*. When the export has GPU metrics samples (``nsys profile
    --gpu-metrics-devices=all``), the finding also carries the link throughput measured while the main
    direction's copies ran (``measured_link``: PCIe/NVLink/C2C metrics, mean and max during the copies
    next to the mean over the capture).

    Ownership: memory-only time is not idle time, so MEM005 never competes with the idle-gap rules
    (SYNC001, MEM002, GPU001, KRN001, GPU002). It does compete with MEM001 (pageable copies) and
    MEM004 (unified-memory migrations): memory-only time while a pageable copy or a migration runs is
    theirs (pin the memory or prefetch first), so MEM005's impact is the memory-only time during
    which only pinned/device copies and memsets run: ``|all ops| - |kernels + pageable + migrations|``
    summed over the copy-bound devices. Reported when that is at least ``min_memory_only_us``.
    """

    id = "MEM005"
    extra_type = CopyBoundExtra
    name = "memory.copy-bound"
    verdict_kind = "copies"
    next_step = "keep the data resident on the GPU and move only what changes"
    busy_role = "copy_bound"
    category = "memory"
    requires = ("memcpy",)
    thresholds = {
        "min_share_pct": Threshold(10.0, "%", "a device is copy-bound when memory-only time is at least this share "
                                              "of its active span", minimum=0.0, maximum=100.0),
        "min_memory_only_us": Threshold(1000.0, "us", "report when MEM005's own memory-only time adds up to at "
                                                      "least this", minimum=0.0, maximum=MAX_US),
        "small_copy_kib": Threshold(256.0, "KiB", "a copy smaller than this is small (its fixed cost dominates)",
                                    minimum=0.0, maximum=1e12),
        "host_link_gbps": Threshold(0.0, "GB/s", "peak of the host link per direction; 0: typical for the GPU "
                                                 "generation", minimum=0.001, maximum=1e5, special=(0.0,)),
    }
    summary = "Memory-only time that dominates a device, per direction with bandwidth against the link"
    advice = (
        "By case: many small copies (batch, pack, keep resident); a saturated link (move fewer bytes, "
        "overlap the rest with compute on a side stream, GPUDirect Storage for file-fed input); a link "
        "far below its peak (pinning, link width, NUMA placement); device copies and memsets (avoid or "
        "fuse them); peer copies (NVLink pairs, peer access).")

    def missing(self, run: Run) -> str | None:
        traces = run.of_tool(self.tool)
        if traces and not self.applicable(run):
            return "no report has copies (memcpy table empty): collect CUDA activity with nsys profile --trace=cuda"
        return super().missing(run)

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        units = [u for u in unit_ops(trace) if len(u)]
        if not units:
            return []
        d = _memory_ops(trace, units)
        bounds = np.searchsorted(d["unit"], np.arange(len(units) + 1))
        peaks = _peaks(trace, ctx.params["host_link_gbps"])
        small_bytes = ctx.params["small_copy_kib"] * 1024
        dirs = {name: DirStats() for name in DIRECTIONS}
        devices: list[CopyBoundDevice] = []
        top_rows = []
        for i, u in enumerate(units):
            a, b = bounds[i], bounds[i + 1]
            if a == b:
                continue
            mem = np.flatnonzero(u.cat == MEMORY)
            if len(mem) != b - a:  # cannot happen: the same rows as the unit's memory ops
                raise RuntimeError(f"unit {u.pid}/{u.device}: {len(mem)} memory ops but {b - a} copies and memsets")
            span = int(u.end.max()) - int(u.start[0])
            kernel = u.cat != MEMORY
            whole, busy_k = union_ns(u.start, u.end), union_ns(u.start, u.end, kernel)
            memory_only = whole - busy_k
            if span <= 0 or 100.0 * memory_only < ctx.params["min_share_pct"] * span:
                continue
            elsewhere = d["elsewhere"][a:b]
            if elsewhere.any():
                covered = kernel.copy()
                covered[mem[elsewhere]] = True
                own = whole - union_ns(u.start, u.end, covered)
            else:
                own = memory_only
            peak = _peak_for(peaks, u.pid, u.device)
            dur = d["end_ns"][a:b] - d["start_ns"][a:b]
            nbytes, dcode = d["bytes"][a:b], d["dir"][a:b]
            small = nbytes < small_bytes
            for c, name in enumerate(DIRECTIONS):
                m = dcode == c
                if m.any():
                    ds = dirs[name]
                    ds.add(dur[m], nbytes[m], small[m], elsewhere[m])
                    if ds.peak_gbps is None and peak is not None:
                        ds.peak_gbps, ds.peak_source = _dir_peak(c, peak)
            devices.append(CopyBoundDevice(pid=u.pid, device=u.device, span_ns=span, memory_only_ns=memory_only,
                                           mem005_ns=own, memory_only_pct=round(100.0 * memory_only / span, 3)))
            cand = np.flatnonzero(~elsewhere)
            for j in cand[top_order(dur[cand], d["start_ns"][a:b][cand], 20)]:
                top_rows.append((int(dur[j]), int(d["start_ns"][a + j]), int(d["tbl"][a + j]),
                                 int(d["row_id"][a + j]), DIRECTIONS[int(dcode[j])]))
        impact = sum(x["mem005_ns"] for x in devices)
        if not devices or impact < ctx.params["min_memory_only_us"] * 1000:
            return []
        used = {k: v for k, v in dirs.items() if v.count}
        main = max(used, key=lambda k: (used[k].time_ns, k))
        top_rows.sort(key=lambda r: (-r[0], r[1]))
        evidence = _evidence(trace, top_rows[:20])
        memory_only = sum(x["memory_only_ns"] for x in devices)
        span = sum(x["span_ns"] for x in devices)
        share = pct(impact, report_span_ns(trace))
        parts = "; ".join(_describe(k, v) for k, v in sorted(used.items(), key=lambda kv: -kv[1].time_ns))
        owned_elsewhere = memory_only - impact
        # Measured link throughput while the main direction's copies ran, when GPU metrics were sampled.
        measured = link_during_copies(trace, MEASURED_KINDS.get(main, []))
        extra = CopyBoundExtra(memory_only_ns=int(memory_only), main_direction=main,
                               directions={k: v.to_dict() for k, v in used.items()}, devices=list(devices),
                               measured_link=list(measured) or None)
        note = (f" {fmt_ms(owned_elsewhere)} of it ran while a pageable copy or a unified-memory migration did "
                "(counted under MEM001/MEM004)." if owned_elsewhere else "")
        return [Finding(
            rule_id=self.id,
            title=(f"Copy-bound: {fmt_ms(memory_only)} with only copies running on {fmt.count(len(devices))} device(s) "
                   f"({fmt.pct(100.0 * memory_only / span)} of their span), mostly {main}"),
            message=(f"On {fmt.count(len(devices))} device(s) copies and memsets ran with no kernel beside them for "
                     f"{fmt_ms(memory_only)} of {fmt_ms(span)}.{note} By direction: {parts}."),
            impact_ns=int(impact), impact_pct=share, advice=_advice(main, used[main]),
            evidence=evidence, evidence_total=sum(v.count - v.elsewhere for v in used.values()),
            report=trace.label, rank=trace.rank,
            extra=extra,
        )]


def _dir_peak(code: int, peak: Peaks) -> tuple[float | None, str]:
    if code in HOST:
        return peak.host_gbps, peak.host_source
    if code == 2 and peak.memory_gbps:
        return peak.memory_gbps / 2, "half the device memory bandwidth from the export (a copy reads and writes)"
    if code == 4 and peak.memory_gbps:
        return peak.memory_gbps, "device memory bandwidth from the export"
    if code == 3:
        return None, "unknown: the export does not describe the GPU-to-GPU link (NVLink or PCIe)"
    return None, ""


def _describe(name: str, s: DirStats) -> str:
    bw = s.gbps()
    rate = fmt.rate(bw * 1e9) if bw is not None else "n/a"
    vs = f" of a {fmt.rate(s.peak_gbps * 1e9)} peak ({fmt.share(100 * bw / s.peak_gbps)})" if bw and s.peak_gbps else ""
    return (f"{name} {fmt.count(s.count)} x, {fmt.size(s.bytes)} in {fmt_ms(s.time_ns)} at {rate}{vs}, "
            f"{s.bound()}-bound ({fmt.count(s.small)} under the small-copy size)")


def _advice(main: str, s: DirStats) -> str:
    overlap = "Memory-only time is time no kernel runs: overlap copies with compute on another stream. "
    if main in ("DtoD", "memset"):
        return overlap + ADVICE["device"]
    if main == "peer":
        return overlap + ADVICE["peer"]
    if s.bound() == "latency":
        return overlap + ADVICE["latency"]
    bw = s.gbps()
    if main in ("HtoD", "DtoH") and bw and s.peak_gbps and bw < 0.5 * s.peak_gbps:
        return ADVICE["slow"]
    return ADVICE["saturated"]


def _evidence(trace: Trace, rows: list[tuple]) -> tuple[Evidence, ...]:
    """The longest copies MEM005 owns: (dur, start, table code, rowid, direction)."""
    if not rows:
        return ()
    values = ", ".join(f"({i}, {t}, {r})" for i, (_, _, t, r, _) in enumerate(rows))
    found = {int(r[0]): r[1:] for r in trace.sql(f"""
        WITH v(i, tbl, r) AS (VALUES {values})
        SELECT v.i, m.pid, m.device, m.stream, m.start_ns, m.end_ns, m.bytes FROM v JOIN memcpy m
          ON v.tbl = 0 AND m.rowid = v.r
        UNION ALL
        SELECT v.i, m.pid, m.device, m.stream, m.start_ns, m.end_ns, m.bytes FROM v JOIN memset m
          ON v.tbl = 1 AND m.rowid = v.r""")}  # noqa: S608 - integers only
    got = [(found[i], rows[i][4]) for i in range(len(rows)) if i in found]
    nvtx = nvtx_at(trace, [(r[0], r[3]) for r, _ in got])
    out = []
    for (r, direction), n in zip(got, nvtx, strict=True):
        dur = int(r[4]) - int(r[3])
        nbytes = int(r[5] or 0)
        out.append(Evidence(start_ns=int(r[3]), end_ns=int(r[4]), device=r[1], stream=r[2], pid=r[0],
                            rank=trace.rank, name=direction, nvtx=n, value_ns=dur,
                            detail={"bytes": nbytes, "gbps": round(nbytes / dur, 3) if dur else None}))
    return tuple(out)

