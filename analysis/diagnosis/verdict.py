"""The verdict: one sentence on what bounds a report (or a run) and what to do first, with its cost.

Not "the top finding wins": the verdict first asks what kind of run this is, then which finding speaks
for it, in this order (each step is a question about the whole report, answered from the breakdown,
the phases and the findings):

0. Did the run fail (an uncaught exception or an abort in its last CPU samples, no GPU work after it)? Then
   ``failed_run``. Did the capture end during start-up (CUDA calls, no kernel and no launch, no call of the
   program's end)? Then ``startup``, saying so and asking for a longer capture.
1. Did the export record GPU activity at all? If not: ``no_gpu_data``, saying what it has and what to
   collect.
2. Is it a one-shot program whose one-off stretches, start-up (from the CUDA program's first call to the end of
   set-up) and teardown (after the last GPU operation), are together at least half of the trace and
   ``ONE_OFF_RATIO`` times the window analysed? Then ``startup`` / ``teardown`` (the larger): nothing in the GPU
   work matters until that is excluded or fixed. Host work before the first CUDA call is outside the GPU program:
   context in the sentence, not start-up to shorten. The calls the sentence lists are taken on the same window as
   the cost, with the share of it their union covers.
3. Is the loop paced by its input (``iterations.anatomy.kind == "host_paced"``)? Then ``host_paced``.
4. Is the GPU busy (``GPU_BOUND_PCT`` or more of the window)? Then what fills the busy time decides:
   copies (``copies``), launch shapes that leave most SMs idle (``launch_shape``, KRN004), else the
   kernels themselves (``gpu_bound_kernel``: KRN005's ncu command when one kernel dominates).
5. Otherwise the GPU waits, and the finding that owns the most time in the window says on what
   (each rule's own ``verdict_kind`` and ``next_step``, ``Rule.verdict_step``; what else the verdict reads of a
   finding is its rule's trait too, ``Rule.host_work``, ``round_trip``, ``busy_role`` ...). Idle in which nothing of the
   host's was recorded (GPU001 whose idle is mostly ``none``: no call, range, CPU sample or switch-out) is an absence of evidence,
   not a cause: when a finding that names what the host was doing owns at least ``NAMED_SHARE`` of the
   idle, the verdict leads with it and says how much idle has nothing recorded and how to see it.

Kinds (the vocabulary of ``verdict.kind``): see ``KINDS``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NotRequired, TypedDict

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.registry import default_registry
from analysis.loops.phases import activity_bounds, phase_info, top_calls
from analysis.model.capture import FLAGS, captured
from analysis.model.trace import Trace
from analysis.report_types import ReportInfo
from analysis.results import (
    DominantKernelExtra,
    IdleGapsExtra,
    LaunchBoundExtra,
    LaunchShapeExtra,
    OsBlockedExtra,
    Verdict,
)

KINDS: dict[str, str] = {
    "no_gpu_data": "the export has no GPU activity (kernels, copies, memsets) to judge",
    "startup": "one-off start-up (CUDA context, allocations, communicators, input) dominates the trace",
    "teardown": "one-off teardown after the last GPU operation dominates the trace",
    "host_paced": "the loop waits for its input by design (frames, requests)",
    "gpu_bound_kernel": "the GPU is busy and its kernels are the lever: profile them",
    "launch_shape": "the GPU looks busy but its launches use a fraction of its SMs",
    "copies": "memory copies fill the GPU's time or block the host",
    "uvm": "unified-memory page migrations stall the GPU",
    "sync_bound": "the host waits on the GPU in synchronization calls and leaves it idle",
    "allocation": "memory allocation and free calls in the loop leave the GPU idle",
    "launch_bound": "kernels are shorter than the host needs to launch them",
    "communication": "communication (NCCL, MPI) is exposed",
    "jit": "compilation (JIT, module loading) leaves the GPU idle",
    "host_bound": "the host is busy elsewhere (CPU work, I/O, Python) and the GPU waits",
    "network": "the NCCL log shows the network path or a failure on it limits the run (no nsys report says more)",
    "failed_run": "the run failed (an uncaught exception or an abort in its last CPU samples): fix it, do not tune it",
}

GPU_BOUND_PCT = 80.0   # busy share of the window at which the GPU, not the host, bounds the run
ONE_OFF_SHARE = 0.5    # start-up or teardown at least this share of the trace ...
ONE_OFF_RATIO = 10.0   # ... and at least this many times the analysed window: the capture is about it
SHAPE_SHARE = 0.5      # KRN004's cost at least this share of compute kernel time: the shape is the story
COPY_SHARE = 0.5       # copies at least this share of busy time: copies are the story
NAMED_SHARE = 0.2      # a recorded cause owning this share of the idle leads over idle with nothing recorded

# GPU001's idle whose cause is process set-up (context, modules, communicators) is start-up, not the loop.
SETUP_NEXT = ("exclude one-off set-up from the measurement (warm up, capture range) or create contexts and "
              "communicators once")
LABELS = {"sync_bound": "Sync-bound", "copies": "Copy-bound", "uvm": "Unified-memory migrations",
          "allocation": "Allocation every iteration", "launch_bound": "Launch-bound",
          "gpu_bound_kernel": "GPU-bound", "launch_shape": "Launch shape", "host_bound": "Host-bound",
          "communication": "Communication-bound", "jit": "Compilation", "startup": "Start-up"}


CAPTURE_FLAGS = tuple((flag, table) for flag, table, _ in FLAGS)


def missing_flags(facts: VerdictFacts) -> list[str]:
    """The capture flags that would show the host's work and that the export did not use (all of them when the
    facts do not say: a verdict built without the trace)."""
    have = facts.get("captured") or {}
    return [flag for flag, _ in CAPTURE_FLAGS if not have.get(flag)]


def _collect(facts: VerdictFacts, what: str) -> str:
    """``collect <flags> to <what>`` for the flags not yet used; empty when the capture already had them all."""
    flags = missing_flags(facts)
    return f"collect {' '.join(flags)} to {what}" if flags else ""


class PtxJit(TypedDict):
    """The launch and module-load calls that JIT-compiled PTX (``ptx_jit``): ``[name, start_ns, ns, samples in the
    compiler, samples]`` each, their time together, the GPUs' architectures to build for."""

    calls: list[list[Any]]
    ns: int
    archs: list[str]


class EndedInStartup(TypedDict):
    """A capture that ended during start-up (``ended_in_startup``): the stretch, the calls filling it, the copies and
    memsets in it."""

    ns: int
    calls: list[tuple[str, int]]
    gpu_ops: int


class DataPath(TypedDict):
    """Start-up that fills the managed memory the kernels read (``data_path``)."""

    ns: int
    managed_allocs: int
    managed_alloc_ns: int
    migrations_in: int
    bytes_in: int
    os_calls: list[tuple[str, int]]


class Failure(TypedDict):
    """How the run failed (``failed_run``, from ``meta['failure']``): when, which thread, the frames of its last CPU
    samples."""

    ns: int
    pid: int | None
    tid: int | None
    frames: str | None


class VerdictFacts(TypedDict):
    """What the verdict needs of the whole report (``verdict_facts``; saved with the report's facts as JSON, so the
    verdict reads it back as a mapping). The keys from ``cuda_threads`` on are there only where they apply."""

    t0_ns: int | None
    t1_ns: int | None
    g0_ns: int | None
    g1_ns: int | None
    captured: dict[str, bool]
    ended_in_startup: EndedInStartup | None
    failure: Failure | None
    cuda_threads: NotRequired[int]
    c0_ns: NotRequired[int]
    s1_ns: NotRequired[int]
    startup_calls: NotRequired[list[tuple[str, int]]]
    startup_covered_ns: NotRequired[int]
    teardown_calls: NotRequired[list[tuple[str, int]]]
    teardown_covered_ns: NotRequired[int]
    pre_cuda_calls: NotRequired[list[tuple[str, int]]]
    data_path: NotRequired[DataPath | None]
    ptx_jit: NotRequired[PtxJit | None]  # always there, set last (the key order of the saved facts)


def verdict_facts(trace: Trace) -> VerdictFacts:
    """What the verdict needs from the whole (unwindowed) report: the first and last recorded activity
    (``t0_ns``/``t1_ns``), the first activity of the CUDA program (``c0_ns``: its first CUDA call, GPU operation
    or NVTX range; host work before it is outside the GPU program), the first and last GPU operation
    (``g0_ns``/``g1_ns``), where one-shot set-up ends (``s1_ns``: ``phases.setup_end``), the CUDA calls and
    set-up ranges that fill start-up (``c0_ns`` to ``s1_ns``) and teardown, with the share of each stretch their
    union covers (``*_covered_ns``), what the host did before the CUDA program (``pre_cuda_calls``), and the
    capture flags the export used (``captured``)."""
    bounds = activity_bounds(trace)
    parts = [f'SELECT MIN(start_ns) s, MAX(end_ns) e FROM "{t}"' for t in ("kernels", "memcpy", "memset")  # noqa: S608
             if trace.has_rows(t)]
    g = trace.sql("SELECT MIN(s), MAX(e) FROM (" + " UNION ALL ".join(parts) + ")")[0] if parts else (None, None)  # noqa: S608
    g1 = None if g[1] is None else int(g[1])
    # The capture flags the export used (its settings, else its rows: ``analysis.model.capture``); a flag already
    # on is never the next step.
    out: VerdictFacts = {"t0_ns": bounds[0] if bounds else None, "t1_ns": bounds[1] if bounds else None,
                         "g0_ns": None if g[0] is None else int(g[0]), "g1_ns": g1, "captured": captured(trace),
                         "ended_in_startup": ended_in_startup(trace, bounds[1]) if bounds else None,
                         "failure": failed_run(trace, g1)}
    # The threads that call CUDA, in a one-shot program (the only one whose sleep can be a pause: ``_pause``): a
    # sleep on the only one has no other thread of the program to wait for.
    if trace.has_rows("cuda_api") and bounds and not len(phase_info(trace).loop):
        out["cuda_threads"] = int(trace.scalar("SELECT COUNT(*) FROM (SELECT DISTINCT pid, tid FROM cuda_api)") or 0)
    g0 = out["g0_ns"]
    if bounds and g0 is not None and g1 is not None:  # a first GPU operation implies a last
        c0 = _cuda_start(trace, g0)
        s1 = _setup_end(trace, g0)
        out["c0_ns"], out["s1_ns"] = c0, s1
        out["startup_calls"] = start = top_calls(trace, c0, s1)
        out["startup_covered_ns"] = covered_ns(trace, c0, s1, [n for n, _ in start])
        out["teardown_calls"] = end = top_calls(trace, g1, bounds[1])
        out["teardown_covered_ns"] = covered_ns(trace, g1, bounds[1], [n for n, _ in end])
        out["pre_cuda_calls"] = _os_calls(trace, bounds[0], c0) if c0 > bounds[0] else []
        out["data_path"] = data_path(trace, c0, g0)
    out["ptx_jit"] = ptx_jit(trace)
    return out


# A CPU sample whose innermost frame lies in the PTX JIT compiler (the driver's libnvidia-ptxjitcompiler, the
# nvPTXCompiler library, the __cuda_ptx* entry points): the driver compiling PTX for a GPU the binary has no SASS for.
PTX_JIT_RE = r"(?i)(ptxjitcompiler|nvptxcompiler|__cuda_ptx)"
# The calls a PTX JIT runs inside: a launch (lazy module loading compiles at the first launch of a kernel) or a
# module or library load.
PTX_CALLS_RE = r"^(cu(da)?Launch\w*|cu(Module|Library)Load\w*)$"


def ptx_jit(trace: Trace) -> PtxJit | None:
    """The launch and module-load calls during which the calling thread was sampled in the PTX JIT compiler
    (``PTX_JIT_RE``, the sample's innermost frame or its module): per call (name, start, duration, samples in the
    compiler, samples in all), their time together, and the architecture of the GPU(s) (``devices``' compute
    capability, ``89`` for 8.9) to build for. None without such a sample."""
    if not (trace.has_rows("cpu_samples") and trace.has_rows("cuda_api")):
        return None
    rows = trace.sql("""
        WITH s AS (SELECT pid, tid, start_ns FROM cpu_samples
                   WHERE (function ILIKE '%ptx%' OR module ILIKE '%ptx%')
                     AND regexp_matches(COALESCE(function, '') || ' ' || COALESCE(module, ''), $re))
        SELECT a.name, a.start_ns, a.end_ns - a.start_ns AS dur, COUNT(*) AS n,
               (SELECT COUNT(*) FROM cpu_samples x WHERE x.pid = a.pid AND x.tid = a.tid
                  AND x.start_ns >= a.start_ns AND x.start_ns < a.end_ns) AS total
        FROM cuda_api a JOIN s ON s.pid = a.pid AND s.tid = a.tid AND s.start_ns >= a.start_ns AND s.start_ns < a.end_ns
        WHERE regexp_matches(a.name, $calls)
        GROUP BY a.pid, a.tid, a.name, a.start_ns, a.end_ns ORDER BY a.start_ns""",
                     {"re": PTX_JIT_RE, "calls": PTX_CALLS_RE})
    if not rows:
        return None
    archs = sorted({f"{int(a)}{int(b)}" for a, b in trace.sql(
        "SELECT DISTINCT cc_major, cc_minor FROM devices WHERE cc_major IS NOT NULL AND cc_minor IS NOT NULL")})
    return {"calls": [[str(n), int(s), int(d), int(k), int(total)] for n, s, d, k, total in rows],
            "ns": sum(int(r[2]) for r in rows), "archs": archs}


def ptx_step(jit: PtxJit) -> str:
    """The next step for a PTX JIT: build the kernels for the GPU's architecture, so the driver has SASS to load."""
    archs = list(jit.get("archs") or []) or ["XX"]
    flags = " ".join(f"-gencode arch=compute_{a},code=sm_{a}" for a in archs)
    return f"build for the GPU's architecture ({flags}) so the driver does not JIT-compile PTX"


def _ptx_text(jit: PtxJit) -> str:
    """``; the first cudaLaunchKernel JIT-compiles PTX: 37.2 ms (12 of 15 CPU samples in the PTX compiler)``."""
    calls = jit["calls"]
    first = calls[0]
    more = f" and {fmt.count(len(calls) - 1)} more call(s), {_ms(int(jit['ns']))} in all" if len(calls) > 1 else ""
    return (f"; {'the first ' if len(calls) == 1 else ''}{first[0]} JIT-compiles PTX: {_ms(first[2])} ({first[3]} of "
            f"its {first[4]} CPU samples in the PTX compiler){more}")


def _with_ptx(v: Verdict, facts: VerdictFacts) -> Verdict:
    """A verdict about one-off set-up or compilation whose set-up includes a PTX JIT (``ptx_jit``) names it and
    asks for a build for the GPU's architecture (issue #39, class 5): first when the JIT is at least half of the
    verdict's cost (or the cost is unknown), else right after the verdict's own fix."""
    jit = facts.get("ptx_jit")
    if not jit or v.kind not in ("startup", "jit"):
        return v
    step = ptx_step(jit)
    text = v.text[:-1] + _ptx_text(jit) + "." if v.text.endswith(".") else v.text + _ptx_text(jit)
    if v.impact_ns is None or 2 * int(jit["ns"]) >= int(v.impact_ns):
        return replace(v, text=text, next_step=step + (f"; then {v.next_step}" if v.next_step else ""))
    first, _, rest = v.next_step.partition("; then ")  # the verdict's own fix, then the build, then the rest
    return replace(v, text=text, next_step="; then ".join(x for x in (first, step, rest) if x))


def failed_run(trace: Trace, g1: int | None) -> Failure | None:
    """The run failed when one of its threads' last CPU samples shows an uncaught exception or an abort
    (``meta['failure']``, found at ingest: ``analysis.readers.nsys.normalize.FAILED``) and no GPU work follows it
    (after its last GPU operation, or in a run without any). None otherwise."""
    raw = trace.meta.get("failure")
    if not raw:
        return None
    try:
        found = json.loads(raw)
        at = int(found["ns"])
    except (ValueError, KeyError, TypeError):
        return None
    return found if g1 is None or at >= g1 else None


# The calls and ranges of a program's end: a capture that recorded one of them last saw the program finish.
TEARDOWN_RE = (r"^(cuda(Free\w*|DeviceReset|HostUnregister)|cu(CtxDestroy|DevicePrimaryCtxRelease|DevicePrimaryCtxReset"
               r"|ModuleUnload|LibraryUnload|MemFree|MemRelease)\w*|nccl(CommDestroy|CommFinalize|CommAbort)|P?MPI_Finalize)$")


def ended_in_startup(trace: Trace, t1: int) -> EndedInStartup | None:
    """Whether the capture ended during the CUDA program's start-up: CUDA calls were recorded, but no kernel and no
    kernel launch (a launch without its kernel is lost GPU tracing, not an early end), and the last call recorded is
    not one of the program's end (``TEARDOWN_RE``: frees, destroys, finalize). Then: the stretch from the first CUDA
    call to the capture's end, the calls that fill it, and the copies or memsets it holds. None otherwise."""
    if not trace.has_rows("cuda_api") or trace.has_rows("kernels"):
        return None
    if trace.scalar("SELECT COUNT(*) FROM cuda_api WHERE regexp_matches(name, '[Ll]aunch')"):
        return None
    last = trace.scalar("SELECT name FROM cuda_api ORDER BY start_ns DESC, end_ns DESC LIMIT 1")
    ranges = (trace.scalar("SELECT COUNT(*) FROM nvtx WHERE regexp_matches(text, $re)", {"re": TEARDOWN_RE})
              if trace.has_rows("nvtx") else 0)
    if last is None or re.match(TEARDOWN_RE, str(last)) or ranges:
        return None
    c0 = int(trace.scalar("SELECT MIN(start_ns) FROM cuda_api"))
    ops = sum(int(trace.scalar(f'SELECT COUNT(*) FROM "{t}"') or 0) for t in ("memcpy", "memset")  # noqa: S608
              if trace.has_rows(t))
    return {"ns": int(t1 - c0), "calls": top_calls(trace, c0, t1), "gpu_ops": ops}


MANAGED_ALLOCS = ("cudaMallocManaged", "cuMemAllocManaged")


def data_path(trace: Trace, c0: int, g0: int) -> DataPath | None:
    """The start-up before the first GPU operation (``[c0, g0)``) when it feeds the GPU's data path: managed memory
    is allocated in it and, once the kernels run, its pages migrate in from the host (``UVM_HtoD``), which they do
    only for pages the host touched first. The host's work there (reading and converting the input into managed
    memory, after the CUDA set-up) is then the GPU program's own host work, not context. None when that premise
    does not hold (no managed allocation before the first GPU operation, or nothing migrated in after it)."""
    if g0 <= c0 or not trace.has_rows("cuda_api") or not trace.has_rows("memcpy"):
        return None
    n_alloc, alloc_ns = trace.sql(f"""SELECT COUNT(*), COALESCE(SUM(end_ns - start_ns), 0) FROM cuda_api
                                      WHERE list_contains($names, name) AND start_ns >= {int(c0)}
                                        AND start_ns < {int(g0)}""", {"names": list(MANAGED_ALLOCS)})[0]  # noqa: S608
    if not n_alloc:
        return None
    n_in, bytes_in = trace.sql(f"""SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM memcpy
                                   WHERE copy_kind = 'UVM_HtoD' AND start_ns >= {int(g0)}""")[0]  # noqa: S608
    if not n_in:
        return None
    calls: list[tuple[str, int]] = []
    if trace.has_rows("osrt"):  # the OS calls of the threads that allocated the managed memory (they fill it)
        calls = [(str(a), int(b)) for a, b in trace.sql(f"""
            SELECT o.name, SUM(LEAST(o.end_ns, {int(g0)}) - GREATEST(o.start_ns, {int(c0)}))::BIGINT AS t
            FROM osrt o SEMI JOIN (SELECT DISTINCT pid, tid FROM cuda_api WHERE list_contains($names, name)
                                   AND start_ns >= {int(c0)} AND start_ns < {int(g0)}) a
                        ON a.pid = o.pid AND a.tid = o.tid
            WHERE o.start_ns < {int(g0)} AND o.end_ns > {int(c0)} AND o.name IS NOT NULL
            GROUP BY o.name HAVING t > 0 ORDER BY t DESC, o.name LIMIT 2""", {"names": list(MANAGED_ALLOCS)})]  # noqa: S608
    return {"ns": int(g0 - c0), "managed_allocs": int(n_alloc), "managed_alloc_ns": int(alloc_ns),
            "migrations_in": int(n_in), "bytes_in": int(bytes_in or 0), "os_calls": calls}


def _setup_end(trace: Trace, g0: int) -> int:
    """Where one-shot set-up ends (``phases.setup_end``: NCCL communicators, MPI_Init, context and module loading
    can run past the first GPU operation), read from the report's start-up phase when its phases are known; a
    report with a loop has no such set-up stretch: its start-up, for the verdict, ends at the first GPU operation."""
    info = phase_info(trace)
    if len(info.loop):
        return g0
    end = next((p.end_ns for p in info.phases if p.name == "startup"), None)
    return max(g0, int(end)) if end is not None else g0


def _cuda_start(trace: Trace, g0: int) -> int:
    """The CUDA program's first activity: its first CUDA call, NVTX range or GPU operation (not an OS call or a
    zero-length row of the process before it)."""
    parts = [f"SELECT MIN(start_ns) FROM {t}" + (" WHERE kind <> 'mark'" if t == "nvtx" else "")  # noqa: S608
             for t in ("cuda_api", "nvtx") if trace.has_rows(t)]
    firsts = [int(v) for p in parts if (v := trace.scalar(p)) is not None]
    return min([g0, *firsts])


def covered_ns(trace: Trace, lo: int, hi: int, names: Sequence[str]) -> int:
    """How much of ``[lo, hi)`` the union of the named CUDA calls and NVTX ranges covers (nested calls once)."""
    if not names or hi <= lo:
        return 0
    parts = ["SELECT start_ns, end_ns FROM cuda_api WHERE list_contains($names, name)"
             if trace.has_rows("cuda_api") else "",
             "SELECT start_ns, end_ns FROM nvtx WHERE kind <> 'mark' AND list_contains($names, text)"
             if trace.has_rows("nvtx") else ""]
    sql = " UNION ALL ".join(p for p in parts if p)
    row = trace.sql(f"""
        WITH c AS (SELECT GREATEST(start_ns, {int(lo)}) s, LEAST(end_ns, {int(hi)}) e FROM ({sql})
                   WHERE start_ns < {int(hi)} AND end_ns > {int(lo)}),
             o AS (SELECT s, e, MAX(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS r FROM c),
             g AS (SELECT s, e, SUM(CASE WHEN r IS NULL OR s > r THEN 1 ELSE 0 END) OVER (ORDER BY s, e) AS grp FROM o)
        SELECT COALESCE(SUM(e2 - s2), 0) FROM (SELECT MIN(s) s2, MAX(e) e2 FROM g GROUP BY grp)""",  # noqa: S608
                    {"names": list(names)})[0]
    return int(row[0] or 0)


def _os_calls(trace: Trace, lo: int, hi: int, n: int = 2) -> list[tuple[str, int]]:
    """The OS runtime calls that take the most time in ``[lo, hi)`` (what the host did before the CUDA program)."""
    if not trace.has_rows("osrt"):
        return []
    rows = trace.sql(f"""SELECT name, SUM(LEAST(end_ns, {int(hi)}) - GREATEST(start_ns, {int(lo)}))::BIGINT AS t
                         FROM osrt WHERE start_ns < {int(hi)} AND end_ns > {int(lo)} AND name IS NOT NULL
                         GROUP BY name HAVING t > 0 ORDER BY t DESC, name LIMIT {int(n)}""")  # noqa: S608 - integers
    return [(str(a), int(b)) for a, b in rows]


def _ms(ns: float) -> str:
    return fmt.duration(ns)


def _verdict(kind: str, text: str, impact_ns: int | None, next_step: str, finding: Finding | None) -> Verdict:
    """``rule_id``: the finding the verdict speaks for (None: the verdict is about the report as a whole)."""
    return Verdict(kind, text, None if impact_ns is None else int(impact_ns), next_step,
                   None if finding is None else finding.rule_id)


def finding_kind(finding: Finding) -> str | None:
    """The verdict kind a finding stands for (None: it speaks for no verdict of its own): its rule's
    ``Rule.finding_kind``; None for a rule the registry does not hold."""
    rule = _rules().get(finding.rule_id)
    return rule.finding_kind(finding) if rule is not None else None


def _shared_flag(finding: Finding, name: str) -> bool | None:
    """A flag several rules' extras declare (``owns_idle``: HOST002's evidence-only findings; ``premise_holds``:
    the rules with a premise, docs/rules.md); None where the finding's rule declares none."""
    value = getattr(finding.extra, name, None)
    return value if isinstance(value, bool) else None


@functools.cache
def _rules() -> dict[str, type[Rule]]:
    return {r.id: r for r in default_registry()}


def _rule(finding: Finding) -> type[Rule]:
    """The rule of ``finding``, whose traits the verdict reads (``Rule`` itself, all traits at their defaults, for a
    rule the registry does not hold)."""
    return _rules().get(finding.rule_id, Rule)


def _no_gpu(info: ReportInfo, facts: VerdictFacts) -> Verdict:
    counts = info.get("counts") or {}
    have = [f"{fmt.count(counts[k])} {k.replace('_', ' ')} rows" for k in ("cuda_api", "nvtx") if counts.get(k)]
    it = info.get("iterations") or {}
    loop = (f"; NVTX shows {fmt.count(it['count'])} iterations of '{it.get('range')}'" if it.get("source") == "nvtx" and
            it.get("count") else "")
    what = ("the export has " + " and ".join(have) if have else "the export has no CUDA, NVTX or GPU rows")
    missing = ("GPU activity tracing was off or lost (CUDA API calls without kernels or copies)"
               if counts.get("cuda_api") else "CUDA was not traced")
    return _verdict("no_gpu_data", f"No GPU activity recorded: {what}{loop}; {missing}.", None,
                    "re-profile with nsys profile --trace=cuda,nvtx,osrt --sample=cpu", None)


def _failed(found: Failure) -> Verdict:
    """A run that failed (``failed_run``): say so, with the frames that show it; no tuning advice."""
    frames = str(found.get("frames") or "")
    uncaught = re.search(r"terminate|__cxa_|_Unwind_|PyErr|PyTraceBack", frames)
    text = (f"The run failed: {'an uncaught exception' if uncaught else 'an abort'} ends it ({frames} in the last CPU "
            f"samples of thread {found.get('tid')}, {_ms(int(found['ns']))} into the capture, after its last GPU "
            "operation); the capture shows the run up to the failure, not its performance.")
    return _verdict("failed_run", text, None, "fix the failure first (the program's error output says what failed), "
                    "then profile a run that completes: tuning a failed run measures nothing", None)


def _ended_in_startup(ended: EndedInStartup) -> Verdict:
    """The capture stopped before the program's GPU work (``ended_in_startup``): say so, and how to capture it."""
    calls = ", ".join(f"{n} {_ms(v)}" for n, v in ended.get("calls") or [])
    ops = int(ended.get("gpu_ops") or 0)
    text = (f"The capture ended during start-up: its {_ms(int(ended['ns']))} from the first CUDA call hold set-up "
            f"only ({calls or 'no call with a duration'}"
            + (f"; {fmt.count(ops)} copies or memsets" if ops else "; no GPU operation")
            + "); no kernel was launched and nothing of the program's end (frees, destroys, finalize) was recorded, "
              "so the GPU work is not in this capture.")
    return _verdict("startup", text, None,
                    "capture the work itself: profile longer (a longer nsys --duration, or none) or start the capture "
                    "after set-up (--capture-range=cudaProfilerApi with cudaProfilerStart/Stop around the work, or "
                    "--delay)", None)


def _one_off(info: ReportInfo, facts: VerdictFacts) -> Verdict | None:
    t0, t1, g0, g1 = facts.get("t0_ns"), facts.get("t1_ns"), facts.get("g0_ns"), facts.get("g1_ns")
    if t0 is None or t1 is None or g0 is None or g1 is None:
        return None
    # The CUDA program starts at its first CUDA call (or GPU operation, or NVTX range): host work before it
    # (input generation, a CPU baseline, imports) is outside the GPU program, context and not start-up to shorten.
    c0 = int(facts.get("c0_ns") or t0)
    ext = t1 - c0
    window = int((info.get("breakdown") or {}).get("span_ns") or 0)
    # Start-up ends where set-up ends (context, modules, NCCL communicators, MPI_Init ...), which can be well after
    # the first GPU operation (a memset inside ncclCommInitRank): the calls that fill it are taken on that window.
    s1 = facts.get("s1_ns")
    if s1 is None:  # facts from before s1_ns: the phases' start-up
        setup_end_ = next((int(p["end_ns"]) for p in info.get("phases") or []
                           if p.get("name") == "startup" and p.get("end_ns") is not None), None)
        s1 = max(g0, setup_end_) if setup_end_ is not None and t0 <= setup_end_ <= t1 else g0
    parts = [("startup", int(s1) - c0, facts.get("startup_calls"), facts.get("startup_covered_ns"),
              "in set-up before the GPU work starts" if int(s1) > g0 else "before the first GPU operation"),
             ("teardown", t1 - g1, facts.get("teardown_calls"), facts.get("teardown_covered_ns"),
              "after the last GPU operation")]
    # The one-off stretches together (start-up and teardown: set-up paid once, at both ends) against the trace and
    # the GPU work; the larger one leads and the sentence gives the other.
    one_off = sum(max(0, p[1]) for p in parts)
    if ext <= 0 or one_off < ONE_OFF_SHARE * ext or one_off < ONE_OFF_RATIO * window:
        return None
    lead, other = sorted(parts, key=lambda p: -p[1])
    kind, ns, calls, cov, where = lead
    text = (f"{'Start-up' if kind == 'startup' else 'Teardown'} dominates: {_ms(ns)} of the {_ms(ext)} trace "
            f"passes {where}" + _fill(calls, cov, ns) + f"; the GPU work analysed spans {_ms(window)}")
    if other[1] >= 0.1 * ext:
        text += f"; {'start-up' if other[0] == 'startup' else 'teardown'} adds {_ms(other[1])}" + _fill(
            other[2], other[3], other[1])
    text += _before_cuda(facts, t0, c0, ext)
    step = (SETUP_NEXT + "; then profile many iterations of the real work" if kind == "startup" else
            "exclude teardown from the capture (capture range) and profile many iterations of the work")
    return _verdict(kind, text + ".", ns, step, None)


def _fill(calls: Sequence[tuple[str, int]] | None, covered: int | None, ns: int) -> str:
    """`` (mostly A x, B y: together N% of it)``: the calls that fill a stretch and the share of it their union
    covers (nested calls counted once), so the list never seems to explain more or less than it does."""
    calls = [(n, v) for n, v in (calls or [])[:3] if v > 0]
    if not calls:
        return " (no CUDA call or set-up range recorded in it)"
    fill = ", ".join(f"{n} {_ms(v)}" for n, v in calls)
    if covered is None or ns <= 0:
        return f" (mostly {fill})"
    share = min(100.0, 100.0 * int(covered) / ns)
    return (f" ({'mostly ' if share >= 50 else ''}{fill}: together {fmt.share(share)} of it"
            + ("" if share >= 50 else "; the rest has no CUDA call or set-up range") + ")")


def _before_cuda(facts: VerdictFacts, t0: int, c0: int, ext: int) -> str:
    """The host's stretch before the CUDA program's first call, as context (not counted in start-up)."""
    pre = c0 - t0
    if pre < 0.05 * ext or pre <= 0:
        return ""
    calls = facts.get("pre_cuda_calls") or []
    what = ("(" + ", ".join(f"{n} {_ms(v)}" for n, v in calls) + ") ") if calls else "(nothing recorded shows what) "
    return (f"; the {_ms(pre)} of host work before the first CUDA call {what}is outside the GPU program and not "
            "counted")


def report_verdict(info: ReportInfo, findings: Sequence[Finding], facts: VerdictFacts) -> Verdict:
    """The verdict of one nsys report from its ``reports[]`` object, its findings and ``verdict_facts``. See the
    module docstring for the order of the questions."""
    return _with_ptx(_judge(info, findings, facts), facts)


def _judge(info: ReportInfo, findings: Sequence[Finding], facts: VerdictFacts) -> Verdict:
    """``report_verdict`` before a PTX JIT is named (``_with_ptx``)."""
    counts = info.get("counts") or {}
    failure = facts.get("failure")
    if failure:
        return _failed(failure)
    ended = facts.get("ended_in_startup")
    if ended:
        return _ended_in_startup(ended)
    if not any(counts.get(k) for k in ("kernels", "memcpy", "memset")):
        return _no_gpu(info, facts)
    one_off = _one_off(info, facts)
    if one_off is not None:
        # The finding of the rule whose one-off phase this is (``Rule.one_off_phase``: start-up before the first
        # iteration), when it ran, is the finding this verdict speaks for.
        phase_finding = next((f for f in findings if _rule(f).one_off_phase == one_off.kind), None)
        return replace(one_off, rule_id=phase_finding.rule_id) if phase_finding else one_off
    bd = info.get("breakdown") or {}
    span, idle = int(bd.get("span_ns") or 0), int(bd.get("idle_ns") or 0)
    busy = span - idle
    busy_pct = 100.0 * busy / span if span else 0.0
    phase = (info.get("window") or {}).get("phase")
    # The premise contract (docs/rules.md): a finding whose rule's premise did not hold on the evidence never leads.
    mine = [f for f in findings if f.phase in (phase, None) and _shared_flag(f, "owns_idle") is not False
            and _shared_flag(f, "premise_holds") is not False]
    by_rule = {f.rule_id: f for f in sorted(mine, key=lambda f: -int(f.impact_ns))}
    ana = (info.get("iterations") or {}).get("anatomy") or {}
    if ana.get("kind") == "host_paced":
        duty = float(ana.get("gpu_duty_cycle_pct") or 0.0)
        # Its cost is the idle while the host waits for its input (OS calls on the launching threads), when the
        # report shows that wait; else all idle is the bound and the sentence says nothing recorded shows it.
        waited = ana.get("input_wait_ns")
        why = (f" The host waits for its input {_ms(int(waited))} of the {_ms(idle)} GPU idle (in OS calls on the "
               "launching threads)." if waited is not None else
               f" The GPU is idle {_ms(idle)}; no OS runtime call is recorded to show the wait for input.")
        return _verdict("host_paced", f"Input-paced at {fmt.number(float(ana.get('per_second') or 0))} iterations/s: the GPU "
                        f"is busy {fmt.pct(duty)} of each iteration.{why}",
                        int(waited) if waited is not None else idle,
                        "nothing to fix on the GPU unless the input can arrive faster; to see headroom, profile "
                        "the work per iteration (GPU time and launch latency)", None)
    if busy_pct >= GPU_BOUND_PCT:
        return _gpu_bound(bd, busy, busy_pct, by_rule, info)
    # The GPU waits: the finding that owns the most time says on what. A one-shot program whose only CUDA thread
    # sleeps for most of the idle of a finding that may be a pause (HOST001's OS calls) pauses by design: context,
    # not host work to move.
    pause = _pause(next((f for f in by_rule.values() if _rule(f).may_be_pause), None), facts, info)
    ranked = [f for f in by_rule.values() if finding_kind(f) is not None and _rule(f).leads_idle
              and not (pause and _rule(f).may_be_pause)]
    if pause and not ranked:
        return _verdict("host_paced", f"Pausing by design: the GPU is idle {_ms(idle)}, busy {fmt.pct(busy_pct)} of the "
                        f"window, while the program's only CUDA thread sleeps{pause}.", None,
                        "nothing to fix in the GPU work: remove the sleeps if they are not meant, or profile the work "
                        "without them", None)
    if not ranked:
        see = _collect(facts, "see where the host is")
        return _verdict("host_bound", f"Host-bound: the GPU is busy {fmt.pct(busy_pct)} of the window and idle "
                        f"{_ms(idle)}; no finding explains the idle.", idle,
                        see or "annotate the host's work between the GPU operations with NVTX ranges: the CPU "
                               "samples and OS calls recorded do not say what it is", None)
    top = max(ranked, key=lambda f: int(f.impact_ns))
    unrecorded = top if _rule(top).idle_unrecorded(top) else None
    if unrecorded is not None:
        named = [f for f in ranked if f is not top and int(f.impact_ns) >= NAMED_SHARE * idle]
        top = max(named, key=lambda f: int(f.impact_ns)) if named else top
    kind = finding_kind(top) or "host_bound"
    per_call = _per_call(top, by_rule, idle, busy_pct)
    if per_call is not None:
        return per_call
    step = SETUP_NEXT if kind == "startup" else _rule(top).verdict_step(top)
    label = LABELS.get(kind, kind)
    title = top.title
    if title.lower().startswith(label.lower() + ":"):  # a title that already says it (KRN001's "Launch-bound: ...")
        title = title[len(label) + 1:].lstrip()
    parts = _host_parts(top, by_rule, unrecorded, idle) if kind == "host_bound" else []
    path = (facts.get("data_path") if kind == "host_bound"
            and (info.get("iterations") or {}).get("program") == "one_shot" else None)
    in_window = int(top.impact_ns) + sum(int(p.impact_ns) for p in parts)
    cost = in_window + (int(path["ns"]) if path else 0)
    title += ((f" ({_ms(int(top.impact_ns))})" if parts else "") + "".join(f"; also {p.title}" for p in parts)
              + (_data_path_text(path) if path else ""))
    costs = f"costs {_ms(cost)}" + (f": {_ms(in_window)} in the window and {_ms(int(path['ns']))} of start-up"
                                    if path else " together" if parts else "")
    text = f"{label}: {title} ({costs}; the GPU is idle {_ms(idle)}, busy {fmt.pct(busy_pct)} of the window)"
    sampled = top.host_functions or []
    if sampled:  # CPU samples say where the host was during that idle (HOST002's)
        text += "; the host was sampled in " + ", ".join(
            f"{h.get('function')} {fmt.share(float(h.get('share_pct') or 0))}" for h in sampled[:3])
        if _rule(top).unnamed_host_work:  # the samples name the work: move it, do not ask to find it
            step = (f"move the sampled host work ({', '.join(str(h.get('function')) for h in sampled[:2])}) off "
                    "the launching thread or overlap it with GPU work (a worker thread, asynchronous copies "
                    "into pinned buffers), so the GPU is not idle while it runs")
    elif _rule(top).unnamed_host_work and "--sample=cpu" in missing_flags(facts) and unrecorded is not top:
        step = ("find the host work in the gaps (collect --sample=cpu, or NVTX ranges around it) and move it off "
                "the GPU's critical path")
    elif unrecorded is top:
        see = _collect(facts, "see it")
        step += ("; nothing recorded shows the host's work: " + see if see else
                 "; the CPU samples and OS calls recorded show nothing of the host's work there: annotate it "
                 "with NVTX ranges")
    if unrecorded is not None and unrecorded is not top:
        blind = _unrecorded_ns(unrecorded)
        see = _collect(facts, "see it")
        text += (f"; a further {_ms(blind)} of idle has nothing of the host's recorded"
                 + (f" ({see})" if see else " (not in the CPU samples or OS calls either)"))
    step += "".join(f"; then {_rule(p).next_step}" for p in parts if _rule(p).next_step not in step)
    if pause:
        text += f"; the program's only CUDA thread also sleeps{pause} (a deliberate pause, not counted)"
    if path:
        step += ("; and read the input into managed memory faster or overlapped with GPU work (parallel or "
                 "asynchronous reads), prefetching it to the GPU (cudaMemPrefetchAsync) before the kernels")
    return _verdict(kind, text + ".", cost, step, top)


def _unrecorded_ns(finding: Finding) -> int:
    """The idle with nothing of the host's recorded in a finding whose idle is mostly so (``Rule.idle_unrecorded``):
    its idle-anatomy category ``none``, else its ``no_activity`` cause (GPU001's), else its whole impact."""
    cats: Mapping[str, int] = getattr(finding.extra, "by_category", None) or {}
    causes = finding.extra.causes if isinstance(finding.extra, IdleGapsExtra) else {}
    return int(cats.get("none") or (causes.get("no_activity") or {}).get("total_ns") or finding.impact_ns)


SLEEPS = ("sleep", "usleep", "nanosleep", "clock_nanosleep")  # a deliberate pause (sched_yield is a busy back-off)


def _pause(blocked: Finding | None, facts: VerdictFacts, info: ReportInfo) -> str:
    """`` X of the GPU's idle (nanosleep Y)`` when a one-shot program's only CUDA thread sleeps (``SLEEPS``) for at
    least half of ``blocked``'s idle (a finding that may be a pause, ``Rule.may_be_pause``: HOST001's OS calls by
    name): a program that pauses on purpose, with no other thread of its own to wait for; empty otherwise (a loop's
    or a multi-threaded program's sleep is a wait to remove)."""
    if (blocked is None or int(facts.get("cuda_threads") or 0) != 1
            or (info.get("iterations") or {}).get("program") != "one_shot"):
        return ""
    by_call = blocked.extra.by_call if isinstance(blocked.extra, OsBlockedExtra) else None
    calls = {str(n): int(ns) for n, ns in (by_call or {}).items()}
    slept = {n: ns for n, ns in calls.items() if n.lstrip("_").removesuffix("64") in SLEEPS}
    total = sum(slept.values())
    if not total or 2 * total < int(blocked.impact_ns):
        return ""
    return f" {_ms(total)} of the GPU's idle (" + ", ".join(f"{n} {_ms(ns)}" for n, ns in slept.items()) + ")"


def _host_parts(top: Finding, by_rule: Mapping[str, Finding], unrecorded: Finding | None,
                idle: int) -> list[Finding]:
    """The other host-work findings (``Rule.host_work``: the launching thread busy with its own serial work,
    computing, blocked in OS calls, communicating over MPI on the host) that a host-bound verdict led by ``top``
    counts with it, each owning at least ``PART_SHARE`` of the idle (their idle is owned exclusively, so the parts
    add up), largest first; a finding whose idle is mostly unrecorded is not known host work and is never one."""
    if not _rule(top).host_work:
        return []
    found = [f for f in by_rule.values() if _rule(f).host_work and f is not top and f is not unrecorded
             and int(f.impact_ns) >= PART_SHARE * idle > 0]
    return sorted(found, key=lambda f: -int(f.impact_ns))


def _data_path_text(path: DataPath) -> str:
    """The start-up that feeds the GPU's data path (``data_path``), as a clause of the host-bound sentence."""
    calls = ", ".join(f"{n} {_ms(v)}" for n, v in path.get("os_calls") or [])
    return (f"; before the first GPU operation the host spends {_ms(int(path['ns']))} setting up CUDA and filling the "
            f"managed memory the kernels read ({fmt.count(int(path['managed_allocs']))} managed allocation(s) "
            f"{_ms(int(path['managed_alloc_ns']))}; {fmt.size(int(path['bytes_in']))} migrate in from the host in "
            f"{fmt.count(int(path['migrations_in']))} migrations once the kernels run"
            + (f"; OS calls {calls}" if calls else "") + ")")


PART_SHARE = 0.1  # a part of the round trip at least this share of its idle is worth its own step


def _per_call(top: Finding, by_rule: Mapping[str, Finding], idle: int, busy_pct: float) -> Verdict | None:
    """A loop of small kernels whose idle is the host's per-launch round trip (the finding of the rule that measures
    it, ``RoundTrip.whole``: KRN001 with the gaps shorter than GPU001's long gap, ``short_gap_idle_ns``). Its cost is
    all that short-gap idle (launches, syncs, copies, allocations and the host code between them: the round trip is
    one cost), its parts are the findings that own idle in it (``Rule.round_trip``), and the next step removes the
    largest parts first: allocations hoisted, copies moved, syncs dropped; a CUDA graph only when no part it cannot
    capture (allocation, synchronous copy, host sync) is large, since a graph removes launches, not the host's reads
    and waits."""
    trips = [(f, trip) for f in by_rule.values() if (trip := _rule(f).round_trip) is not None]
    krn = next((f.extra for f, trip in trips if trip.whole), None)
    if _rule(top).round_trip is None or not isinstance(krn, LaunchBoundExtra) or krn.short_gap_idle_ns is None:
        return None
    short = int(krn.short_gap_idle_ns)
    parts = sorted(((trip, int(f.impact_ns)) for f, trip in trips), key=lambda p: -p[1])
    cost = max(short, int(top.impact_ns))
    label = LABELS.get(finding_kind(top) or "launch_bound", "Launch-bound")
    inside = ", ".join(f"{trip.part} {_ms(ns)}" for trip, ns in parts)
    text = (f"{label}: the host's per-launch round trip leaves the GPU idle {_ms(short)} in "
            f"{fmt.count(int(krn.short_gaps or 0))} short gaps around {fmt.count(int(krn.short_kernels or 0))} short "
            f"kernels (the findings in it: {inside}; the GPU is idle {_ms(idle)}, busy {fmt.pct(busy_pct)} of the "
            "window).")
    big = [trip for trip, ns in parts if not trip.whole and ns >= PART_SHARE * cost]
    steps = [trip.step for trip in big]
    steps.append("fuse the small kernels or give each launch more work" if big else
                 "capture the kernel sequence in a CUDA graph or fuse the small kernels")
    return _verdict(finding_kind(top) or "launch_bound", text, cost, "; then ".join(steps), top)


def _gpu_bound(bd: Mapping[str, Any], busy: int, busy_pct: float, by_rule: Mapping[str, Finding],
               info: ReportInfo) -> Verdict:
    copies = int(bd.get("memory_only_ns") or 0)
    compute = int(bd.get("compute_ns") or 0) + int(bd.get("comm_exposed_ns") or 0)
    if copies >= COPY_SHARE * busy:
        # The copy finding that costs most speaks for it; with none, the step of the rule that measures the copies'
        # share of the GPU's time (``busy_role``).
        top = max((f for f in by_rule.values() if _rule(f).busy_role in ("copies", "copy_bound")),
                  key=lambda f: int(f.impact_ns), default=None)
        step = (_rule(top).next_step if top else
                next(r.next_step for r in _rules().values() if r.busy_role == "copy_bound"))
        return _verdict("copies", f"Copy-bound: copies alone fill {_ms(copies)} of the GPU's {_ms(busy)} busy time "
                        f"({fmt.pct(100.0 * copies / busy)}), kernels {_ms(compute)}.", copies, step, top)
    shape = _busy(by_rule, "launch_shape")
    kernel_ns = int((shape.extra.compute_kernel_ns if shape is not None and isinstance(shape.extra, LaunchShapeExtra)
                     else None) or compute)
    if shape is not None and int(shape.impact_ns) >= SHAPE_SHARE * kernel_ns:
        ev = shape.evidence[0] if shape.evidence else Evidence()
        d = ev.detail or {}
        text = (f"Launch shape: {ev.name} runs {fmt.count(d.get('blocks', 0))} block(s) of "
                f"{fmt.count(d.get('threads_per_block', 0))} thread(s) on {fmt.count(d.get('sm_count'))} SMs, so at most "
                f"{fmt.share(d.get('used_pct', 0))} of the GPU works while the timeline shows it {fmt.pct(busy_pct)} busy: "
                f"{_ms(int(shape.impact_ns))} of {_ms(kernel_ns)} kernel time is unused GPU.")
        return _verdict("launch_shape", text, int(shape.impact_ns), _rule(shape).next_step, shape)
    dom = _busy(by_rule, "dominant_kernel")
    if dom is not None and isinstance(k := dom.extra, DominantKernelExtra):
        cost, where = _per_device(dom)
        if k.is_family:  # many instances of one template, none dominant alone: say so, profile the costliest
            text = (f"One template family is {fmt.pct(float(k.share_pct or 0))} of GPU time: {k.kernel}, "
                    f"{fmt.count(k.instances)} instances, the costliest {fmt.pct(float(k.instance_share_pct or 0))} "
                    f"({where}, GPU busy {fmt.pct(busy_pct)} of the window).")
            return _verdict("gpu_bound_kernel", text, cost,
                            f"profile the costliest instance with ncu, then the next ones: {k.ncu_command}", dom)
        text = (f"One kernel is {fmt.pct(float(k.share_pct or 0))} of GPU time: {k.kernel} "
                f"({where}, GPU busy {fmt.pct(busy_pct)} of the window).")
        return _verdict("gpu_bound_kernel", text, cost, f"profile it with ncu: {k.ncu_command}", dom)
    tops = info.get("top_kernels") or []
    names = ", ".join(f"{k['name']} {fmt.pct(float(k.get('share_pct') or 0))}" for k in tops[:3])
    return _verdict("gpu_bound_kernel", f"GPU-bound: busy {fmt.pct(busy_pct)} of the window; the kernels are the "
                    f"lever (largest over the report: {names}).", compute,
                    "profile the largest kernels with ncu (--set full), starting with the first", None)


def _busy(by_rule: Mapping[str, Finding], role: str) -> Finding | None:
    """The finding that plays ``role`` in a busy GPU's verdict (``Rule.busy_role``), if one ran."""
    return next((f for f in by_rule.values() if _rule(f).busy_role == role), None)


def _per_device(finding: Finding) -> tuple[int, str]:
    """A kernel's cost where it runs on several GPUs at once: the time on the GPU where it takes most (the GPUs
    run side by side, so their sum is no one's time), said as such; on one GPU its time."""
    per: dict[int | None, int] = {}
    for ev in finding.evidence:
        per[ev.device] = per.get(ev.device, 0) + int(ev.value_ns or 0)
    total = int(finding.impact_ns)
    if len(per) < 2:
        return total, _ms(total)
    most = max(per.values())
    return most, f"{_ms(most)} on the busiest of {fmt.count(len(per))} GPUs, {_ms(total)} on all of them"


def run_verdict(verdicts: list[Verdict], names: list[str]) -> Verdict | None:
    """One verdict for a run of several reports: the kind most reports share (ties: the larger cost),
    told by the report where it costs most (``names``: each report's rank or file, for the sentence)."""
    if not verdicts:
        return None
    if len(verdicts) == 1:
        return verdicts[0]
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(verdicts):
        groups.setdefault(v.kind, []).append(i)
    kind = max(groups, key=lambda k: (len(groups[k]), max(int(verdicts[i].impact_ns or 0) for i in groups[k])))
    idx = groups[kind]
    lead = max(idx, key=lambda i: (int(verdicts[i].impact_ns or 0), -i))
    return replace(verdicts[lead], text=f"{fmt.count(len(idx))} of {fmt.count(len(verdicts))} reports ({names[lead]} shown): "
                                        f"{verdicts[lead].text}")
