"""HOST002: where the host CPU was while the GPU idled, from CPU samples on the launching threads."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import TypedDict

import numpy as np

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding, SampledFunction
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.causes import launchers
from analysis.diagnosis.rules.nsys.common import fmt_ms, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.gaps import owned, owner_code, owner_rules
from analysis.model.capture import missing as capture_missing
from analysis.model.trace import Run, Trace
from analysis.results import HostSamplesExtra

SKIP = ("no CPU samples in the report: collect them with nsys profile --sample=cpu "
        "(and --python-sampling=true for Python frames)")

# What the most-sampled leaf function says about the host, checked in order (the first match advises).
KINDS: tuple[tuple[str, str, str], ...] = (
    ("python", r"^_?Py|^python|_PyEval|PyEval_|^pymain",
     "The launching thread was running the Python interpreter while the GPU waited: the step is host-bound. "
     "Capture the step in a CUDA graph or compile it (torch.compile, CUDA graphs), move per-step Python work "
     "(logging, metrics, data munging) off the training loop, and profile it with nsys --python-sampling=true."),
    ("gc", r"gc_collect|collect_generation|_PyGC|garbage",
     "The launching thread was collecting garbage while the GPU waited: freeze long-lived objects (gc.freeze) "
     "or collect between steps (gc.disable, then gc.collect at a chosen point)."),
    ("allocator", r"malloc|^free$|calloc|realloc|^_?_?mem(set|cpy|move)|mmap|munmap|page_fault|clear_page",
     "The launching thread was allocating, clearing or copying host memory while the GPU waited: allocate "
     "once and reuse (pinned staging buffers, caching allocators), and keep host-side copies off the step."),
    ("wait", r"futex|pthread_(mutex|cond|join)|sem_wait|poll|epoll|select|nanosleep|sched_yield|MPI|ncclProxy",
     "The launching thread was waiting (locks, queues, polling, MPI) while the GPU idled: see HOST001 with the "
     "OS runtime trace (--trace=osrt) for the calls and let the producer run ahead."),
)
def _without_osrt_ask(trace: Trace, advice: str) -> str:
    """The advice without asking for the OS runtime trace when the capture had it (``analysis.model.capture``)."""
    if "--trace=osrt" in capture_missing(trace):
        return advice
    return advice.replace(" with the OS runtime trace (--trace=osrt)", "")


GENERIC = ("The launching thread was busy in these functions while the GPU had no work: move that work off "
           "the thread that feeds the GPU (worker threads or processes), overlap it with GPU work, or "
           "make it cheaper.")


def kind_of(function: str | None) -> str | None:
    """The kind of host work a leaf function name suggests (see ``KINDS``), None when none fits."""
    for kind, pattern, _ in KINDS:
        if function and re.search(pattern, function):
            return kind
    return None


class HostCpuSamples(Rule):
    """Where the host CPU was: the functions the launching threads were running while the GPU idled.

    *Why it matters*: the GPU gets work only from the threads that launch it. When it idles while such a
    thread is running on the CPU (not blocked), the host itself is the bottleneck: the interpreter, the
    data pipeline, the allocator or the garbage collector. CPU sampling says which.

    *How it is detected*: the CPU samples (``nsys profile --sample=cpu``; the leaf, innermost, function
    of each call chain) of the process's launching threads (those that launched any of its GPU work) are
    placed in the idle gaps of their process's devices (NVIDIA's pairing, profiler overhead busy) of at
    least ``min_gap_us``, whichever rule owns the gap. A gap that holds k samples gives each 1/k of its
    length; a function's idle time is the sum over its samples. Impact: the idle time so attributed,
    which is the length of every such gap that holds at least one sample.

    Ownership: HOST002 is evidence and owns no idle nanoseconds: its impact is the same idle time the
    idle owners (``idle_claims``, then the gaps' owners GPU001 > KRN001 > GPU002) already own, seen from the host.
    Its severity is always ``info`` and the idle is split by owner in ``by_owner``; do not add its impact
    to theirs. Reported when at least ``min_samples`` samples fall in the gaps and the idle they attribute
    reaches ``min_idle_us``. Skipped when the report has no CPU samples.

    Functions are ranked by samples (then attributed idle); the top one names the finding and its kind
    picks the advice. The gap rules (GPU001, SYNC001, HOST001) show the same samples inside their own
    gaps as ``host_functions`` in their findings.
    """

    id = "HOST002"
    extra_type = HostSamplesExtra
    name = "host.cpu-during-gpu-idle"
    verdict_kind = None  # evidence only: the CPU samples the idle's findings name
    next_step = ""
    category = "host"
    requires = ("kernels", "cpu_samples")
    thresholds = {
        "min_gap_us": Threshold(1000.0, "us", "idle gaps at least this long are sampled (one period of nsys' "
                                              "default 1 kHz CPU sampling)", minimum=0.0, maximum=MAX_US),
        "min_samples": Threshold(10.0, "count", "report when at least this many samples fall in the idle gaps",
                                 minimum=1.0, maximum=1e9),
        "min_idle_us": Threshold(1000.0, "us", "report when the idle with samples adds up to at least this",
                                 minimum=0.0, maximum=MAX_US),
    }
    summary = "Functions the launching threads ran on the CPU while the GPU idled (CPU sampling)"
    advice = (
        "By the kind of the most sampled function: Python interpreter (capture the step in CUDA graphs or"
        " compile it, move per-step Python work off the loop), garbage collection (gc.freeze, collect "
        "between steps), memory allocation and copies (allocate once, reuse pinned buffers), waits "
        "(HOST001 with ``--trace=osrt``); otherwise move the work off the launching thread.")

    def missing(self, run: Run) -> str | None:
        traces = run.of_tool(self.tool)
        if traces and not any(t.has_rows("cpu_samples") for t in traces):
            return SKIP
        return super().missing(run)

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        att = attribute(trace, ctx.all_params, ctx.claimers, ctx.params["min_gap_us"])
        if att is None:
            return []
        by_fn, by_owner, gaps, total, n_in = (att["by_fn"], att["by_owner"], att["gaps"], att["total"],
                                              att["samples"])
        if n_in < ctx.params["min_samples"] or total < ctx.params["min_idle_us"] * 1000:
            return []
        funcs = sorted(by_fn.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
        main, (main_n, _) = funcs[0]
        kind = kind_of(main)
        top = sorted(gaps, key=lambda g: (-g[0], g[1]))[:20]
        nvtx = nvtx_at(trace, [(g[2], g[1]) for g in top])
        evidence = tuple(
            Evidence(start_ns=s, end_ns=s + n, device=d, pid=p, rank=trace.rank, name=f, nvtx=v, value_ns=n,
                     detail={"samples": k})
            for (n, s, p, d, k, f), v in zip(top, nvtx, strict=True))
        share = pct(total, report_span_ns(trace))
        listed = ", ".join(f"{n} {fmt.share(100 * v[0] / n_in)}" for n, v in funcs[:5])
        return [Finding(
            rule_id=self.id,
            title=(f"Host CPU during GPU idle: the launching thread's top function is {main} "
                   f"({fmt.share(100 * main_n / n_in)} of {fmt.count(n_in)} CPU samples)"),
            message=(f"{fmt.count(n_in)} CPU sample(s) of the launching threads fell in {fmt.count(len(gaps))} idle gap(s) "
                     f"({fmt_ms(total)}" + (f", {fmt.pct(share)} of the GPU-active span" if share is not None else "")
                     + f"): {listed}. This idle belongs to the gap rules; HOST002 says where the host was."),
            impact_ns=total, impact_pct=share, severity="info",
            advice=_without_osrt_ask(trace, next((a for k, _, a in KINDS if k == kind), GENERIC)), evidence=evidence,
            evidence_total=len(gaps), report=trace.label, rank=trace.rank,
            extra=HostSamplesExtra(
                owns_idle=False, samples_in_idle=n_in, by_owner=by_owner, main_kind=kind,
                functions=[{"function": n, "samples": int(v[0]), "idle_ns": round(v[1])} for n, v in funcs[:20]]),
        )]


class Attribution(TypedDict):
    """The launching threads' CPU samples in the idle gaps (``attribute``): per function ``[samples, idle ns]``, the
    idle per owning gap rule, the gaps with samples ``(len, start, pid, device, samples, top function)``, totals."""

    by_fn: dict[str, list[float]]
    by_owner: dict[str, int]
    gaps: list[tuple[int, int, int, int | None, int, str]]
    total: int
    samples: int


def attribute(trace: Trace, all_params: Mapping[str, Mapping[str, float]] | None,
              claimers: Sequence[type[Rule]], min_gap_us: float) -> Attribution | None:
    """The CPU samples of the launching threads placed in the idle gaps (see HOST002's docstring): per function
    ``[samples, idle ns]`` (``by_fn``), the idle per owning gap rule, the gaps with samples ``(len, start, pid,
    device, samples, top function)``, and totals. None without samples. Cached on the trace per thresholds."""
    key = ("host002", float(min_gap_us), repr(sorted((k, sorted(v.items())) for k, v in (all_params or {}).items())),
           tuple(r.id for r in claimers))
    if key in trace.memo:
        return trace.memo[key]
    samples = _samples(trace)
    out = None
    if samples:
        out = _attribute(trace, all_params, claimers, samples, int(min_gap_us * 1000))
    trace.memo[key] = out
    return out


def _attribute(trace: Trace, all_params, claimers: Sequence[type[Rule]], samples: dict, min_gap: int) -> Attribution:
    by_fn: dict[str, list[float]] = {}       # function -> [samples, idle ns]
    by_owner: dict[str, int] = {}
    gaps: list[tuple[int, int, int, int | None, int, str]] = []  # (len, start, pid, device, k, top fn)
    total = n_in = 0
    owner_names = {0: "none", **{owner_code(r): r.id for r in owner_rules(claimers)}}
    for u in owned(trace, all_params, claimers):
        pid = u.unit.pid
        if pid is None or pid not in samples:
            continue
        t, fn = samples[pid]
        long_ = np.flatnonzero(u.gap_end - u.gap_start >= min_gap)
        if not len(long_):
            continue
        gs, ge = u.gap_start[long_], u.gap_end[long_]
        at = np.searchsorted(gs, t, side="right") - 1
        inside = (at >= 0) & (t < ge[np.maximum(at, 0)])
        if not inside.any():
            continue
        gi, names = at[inside], fn[inside]
        # Samples and gaps are both in time order, so each gap's samples are one slice.
        cuts = np.flatnonzero(np.r_[True, gi[1:] != gi[:-1]])
        for a, b in zip(cuts, np.r_[cuts[1:], len(gi)], strict=True):
            g = int(gi[a])
            length, k = int(ge[g] - gs[g]), int(b - a)
            in_gap = names[a:b]
            owner = owner_names.get(int(u.owner[long_[g]]), "none")
            for name in in_gap:
                acc = by_fn.setdefault(name, [0, 0.0])
                acc[0] += 1
                acc[1] += length / k
            by_owner[owner] = by_owner.get(owner, 0) + length
            vals, cnt = np.unique(in_gap, return_counts=True)
            top = str(vals[np.argmax(cnt)])
            gaps.append((length, int(gs[g]), pid, u.unit.device, k, top))
            total += length
            n_in += k
    return {"by_fn": by_fn, "by_owner": by_owner, "gaps": gaps, "total": total, "samples": n_in}


def functions_in(trace: Trace, gaps: Sequence[tuple[int | None, np.ndarray, np.ndarray]],
                 top: int = 5) -> list[SampledFunction] | None:
    """Evidence for a gap rule's finding: the leaf functions of the launching threads' CPU samples taken
    inside the rule's own idle gaps ``(pid, starts, ends)``, most sampled first (a sample inside gaps of two
    devices of its process counts once); None when the report has no CPU samples or none fell there."""
    if not trace.has_rows("cpu_samples"):
        return None
    samples = _samples(trace)
    counts: dict[str, int] = {}
    by_pid: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for pid, gs, ge in gaps:
        if pid is not None and pid in samples and len(gs):
            by_pid.setdefault(int(pid), []).append((np.asarray(gs), np.asarray(ge)))
    for pid, parts in by_pid.items():
        gs = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        ge = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        if len(parts) > 1 or (len(gs) > 1 and bool((gs[1:] < gs[:-1]).any())):  # one device's gaps are sorted
            order = np.argsort(gs, kind="stable")
            gs, ge = gs[order], ge[order]
        ge = np.maximum.accumulate(ge)  # reach of the gaps so far: a union test
        t, fn = samples[pid]
        at = np.searchsorted(gs, t, side="right") - 1
        inside = (at >= 0) & (t < ge[np.maximum(at, 0)])
        for name, n in zip(*np.unique(fn[inside], return_counts=True), strict=True):
            counts[str(name)] = counts.get(str(name), 0) + int(n)
    return _ranked(counts, top)


def functions_in_marked(trace: Trace, gaps: Sequence[tuple[int | None, np.ndarray, np.ndarray, np.ndarray]],
                        top: int = 5) -> list[SampledFunction] | None:
    """``functions_in`` for the gaps each ``(pid, starts, ends, marked)`` marks (a boolean per gap) of one device,
    whose gaps are disjoint and in time order (a device's gaps): the samples are looked up among all of them
    and kept when their gap is marked, so the marked gaps are never copied out (10M gaps: 160 MB)."""
    if not trace.has_rows("cpu_samples"):
        return None
    samples = _samples(trace)
    counts: dict[str, int] = {}
    by_pid: dict[int, np.ndarray] = {}
    for pid, gs, ge, marked in gaps:
        if pid is None or pid not in samples or not len(gs):
            continue
        t = samples[pid][0]
        at = np.searchsorted(gs, t, side="right") - 1
        a = np.maximum(at, 0)
        inside = (at >= 0) & (t < ge[a]) & marked[a]
        by_pid[int(pid)] = inside | by_pid[int(pid)] if int(pid) in by_pid else inside
    for pid, inside in by_pid.items():  # a sample inside gaps of two devices of its process counts once
        for name, n in zip(*np.unique(samples[pid][1][inside], return_counts=True), strict=True):
            counts[str(name)] = counts.get(str(name), 0) + int(n)
    return _ranked(counts, top)


def _ranked(counts: dict[str, int], top: int) -> list[SampledFunction] | None:
    total = sum(counts.values())
    if not total:
        return None
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [SampledFunction(function=f, samples=n, share_pct=round(100.0 * n / total, 3), kind=kind_of(f))
            for f, n in ranked]


def _samples(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """pid -> (sample times sorted, leaf function names) of the samples on each process's launching threads
    (cached on the trace: HOST002 and the gap rules' evidence read the same samples)."""
    cached = trace.memo.get("launcher_samples")
    if cached is None:
        cached = trace.memo["launcher_samples"] = _read_samples(trace)
    return cached


def _read_samples(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    tids = launchers(trace)
    if not tids:
        return {}
    values = ", ".join(f"({int(p)}, {int(t)})" for p, ts in tids.items() for t in ts)
    rows = trace.sql(f"""
        WITH th(pid, tid) AS (VALUES {values})
        SELECT s.pid, s.start_ns, COALESCE(s.function, '(unknown)') FROM cpu_samples s
        SEMI JOIN th ON th.pid = s.pid AND th.tid = s.tid
        WHERE s.start_ns IS NOT NULL ORDER BY s.pid, s.start_ns, 3""")  # noqa: S608 - integers only
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for pid, group in groupby(rows, key=lambda r: int(r[0])):  # rows come ordered by pid
        mine = list(group)
        out[pid] = (np.array([r[1] for r in mine], dtype=np.int64), np.array([r[2] for r in mine], dtype=object))
    return out
