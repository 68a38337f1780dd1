"""MEM001-MEM004: pageable copies, blocking copies, synchronous memsets, unified-memory migrations."""

from __future__ import annotations

import re

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.idle_anatomy import HOST_WORK_SUFFIX
from analysis.diagnosis.rules.base import MAX_US, RoundTrip, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import (
    MEMSET_RE,
    fmt_ms,
    nvtx_at,
    pct,
    report_span_ns,
)
from analysis.diagnosis.rules.nsys.copies import COPY_CALL_RE, copy_calls, top_copy_rows
from analysis.diagnosis.rules.nsys.gaps import opened_count, owned
from analysis.diagnosis.rules.nsys.idle_claims import claims
from analysis.model.intervals import union_of_sql
from analysis.model.trace import Trace
from analysis.results import BlockingCopyExtra, MemsetExtra, MigrationExtra, PageableCopyExtra


def _mib(n: int) -> str:
    """Bytes for a finding's text, through the one formatting module: "1.23 GB", "512 B"."""
    return fmt.size(n)


def _evidence(trace: Trace, rows: list[tuple], value_idx: int, detail_keys: tuple[str, ...],
              detail_idx: tuple[int, ...], name_idx: int | None) -> tuple[Evidence, ...]:
    """Evidence from rows shaped (pid, device, stream, start, end, ...)."""
    nvtx = nvtx_at(trace, [(r[0], r[3]) for r in rows])
    return tuple(
        Evidence(start_ns=int(r[3]), end_ns=int(r[4]), device=r[1], stream=r[2], pid=r[0], rank=trace.rank,
                 name=r[name_idx] if name_idx is not None else None, nvtx=v, value_ns=int(r[value_idx]),
                 detail={k: r[i] for k, i in zip(detail_keys, detail_idx, strict=True)})
        for r, v in zip(rows, nvtx, strict=True))


class PageableMemcpy(Rule):
    """Copies from or to pageable host memory.

    *Why it matters*: the driver cannot DMA from pageable memory; it stages the data through a pinned
    buffer, which halves bandwidth at best, and a ``cudaMemcpyAsync`` on pageable memory silently
    becomes synchronous, so the copy neither overlaps compute nor lets the host run ahead.

    *How it is detected*: memcpy operations whose source or destination memory kind is pageable (the
    copy's API call joined through the process and correlation id names it). Async calls among them
    are called out separately. Impact: the GPU time of these copies (what pinned buffers, running
    at full bandwidth and overlapping compute, would largely recover).
    """

    id = "MEM001"
    extra_type = PageableCopyExtra
    name = "memory.pageable-memcpy"
    verdict_kind = "copies"
    next_step = "pin the host buffers (cudaHostAlloc / pin_memory) or keep the data resident on the GPU"
    busy_role = "copies"
    category = "memory"
    requires = ("memcpy",)
    thresholds = {"min_copies": Threshold(1.0, "count", "report when at least this many copies are pageable",
                                          minimum=1.0, maximum=1e9)}
    summary = "Copies through pageable host memory (and async copies that became synchronous)"
    advice = (
        "Pin the host buffers (cudaMallocHost / cudaHostAlloc; PyTorch pin_memory=True) and copy with "
        "cudaMemcpyAsync / non_blocking=True so copies overlap compute.")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        cs = copy_calls(trace).pageable
        n, total, nbytes, n_async, async_ns = cs.count, cs.op_ns, cs.bytes, cs.async_count, cs.async_op_ns
        if n == 0 or n < ctx.params["min_copies"]:
            return []
        top = top_copy_rows(trace, cs.top_rows, """m.pid, m.device, m.stream, m.start_ns, m.end_ns,
            m.end_ns - m.start_ns, a.name, m.copy_kind, m.bytes, m.src_kind, m.dst_kind,
            COALESCE(contains(a.name, 'Async'), FALSE)""")
        evidence = _evidence(trace, top, 5, ("copy_kind", "bytes", "src_kind", "dst_kind", "async_call"),
                             (7, 8, 9, 10, 11), 6)
        share = pct(int(total), report_span_ns(trace))
        asyncs = (f" {fmt.count(n_async)} of them were async calls that ran synchronously ({fmt_ms(int(async_ns))})."
                  if n_async else "")
        return [Finding(
            rule_id=self.id,
            title=f"{fmt.count(n)} copies use pageable host memory ({_mib(int(nbytes))}, {fmt_ms(int(total))})",
            message=(f"{fmt.count(n)} memcpy operation(s) moved {_mib(int(nbytes))} through pageable host memory in "
                     f"{fmt_ms(int(total))} of GPU time.{asyncs}"),
            impact_ns=int(total), impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=int(n), report=trace.label, rank=trace.rank,
            extra=PageableCopyExtra(copies=int(n), bytes=int(nbytes), async_became_sync=int(n_async),
                                               async_became_sync_ns=int(async_ns)),
        )]


class BlockingMemcpy(Rule):
    """Synchronous copies that block the host.

    *Why it matters*: ``cudaMemcpy`` (and the driver's ``cuMemcpy*`` without ``Async``) returns only
    when the copy is done, after all earlier work on the stream; the host queues nothing meanwhile and
    the GPU drains and idles until the host catches up.

    *How it is detected*: copy operations whose API call is a synchronous memcpy, with NVIDIA's
    exclusions (copies within one device, and host-to-device copies of at most 64 KiB, which return
    once staged). Impact: the GPU idle painted inside synchronous copy and memset calls by the idle anatomy
    (``owns_idle``, see ``gaps``): the GPU waiting while the host waits on the copy. The idle after the call
    returned belongs to what the host did next. Also given: the gaps that opened while such a call ran.

    *Premise*: the idle it owns is inside copy calls (a memset that blocks, on managed or pinned memory, is not a
    copy: the finding says so, advises on the memset and does not lead). Pinned memory is advised only where the
    calls that hold most of the idle copy pageable host memory (their copies' memory kinds); otherwise the advice
    is asynchronous copies or data kept on the GPU.
    """

    id = "MEM002"
    extra_type = BlockingCopyExtra
    opened_in = "blocking_copy"
    name = "memory.blocking-memcpy"
    verdict_kind = "copies"
    next_step = "make the copies asynchronous from pinned memory and overlap them with kernels"
    round_trip = RoundTrip("in synchronous copies", "move the per-iteration copies out of the loop or make them "
                                                    "asynchronous")
    busy_role = "copies"
    category = "memory"
    requires = ("memcpy", "cuda_api")
    thresholds = {"min_copies": Threshold(1.0, "count", "report when at least this many copies block",
                                          minimum=1.0, maximum=1e9),
                  "min_idle_us": Threshold(1000.0, "us", "also report, without blocking copies, when the idle "
                                                         "inside copy and memset calls adds up to at least this",
                                           minimum=0.0, maximum=MAX_US)}
    summary = "Synchronous memcpy calls that block the host"
    owns_idle = ("sync_copy", "memset")
    premise = "the idle it owns is inside copy calls (a memset that blocks is not a copy)"
    advice = (
        "Use cudaMemcpyAsync from pinned memory on a stream and synchronize once when the data is needed;"
        " keep results on the GPU instead of reading them back every step.")

    @classmethod
    def verdict_step(cls, finding: Finding) -> str:
        """No pageable copy holds the idle (``pinned_advice`` false): pinning fixes nothing, so the step is
        asynchronous copies or data kept on the GPU."""
        if isinstance(finding.extra, BlockingCopyExtra) and finding.extra.pinned_advice is False:
            return "issue the copies with cudaMemcpyAsync on a stream and synchronize once, or keep the data on the GPU"
        return cls.next_step

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        cs = copy_calls(trace).blocking
        n, host_ns, nbytes = cs.count, cs.call_ns, cs.bytes
        cl = claims(trace, ctx.claimers).by_rule.get(self.id)
        idle = cl.ns if cl is not None else 0
        # The idle inside copy calls is this rule's even where NVIDIA's exclusions leave no blocking copy
        # (async calls on pageable memory, small host-to-device copies).
        if (n == 0 or n < ctx.params["min_copies"]) and (idle <= 0 or idle < ctx.params["min_idle_us"] * 1000):
            return []
        gaps = opened_count(owned(trace, ctx.all_params, ctx.claimers), type(self))
        top = top_copy_rows(trace, cs.top_rows, """a.pid, m.device, m.stream, a.start_ns, a.end_ns,
            a.end_ns - a.start_ns, a.name, m.copy_kind, m.bytes""")
        evidence = _evidence(trace, top, 5, ("copy_kind", "bytes"), (7, 8), 6)
        share = pct(int(idle), report_span_ns(trace))
        by_cat = cl.by_category if cl else {}
        held = _held_copy_kinds(trace, cl.names if cl else [])
        holds, pinned, premise, advice = _pinned_premise(int(by_cat.get("sync_copy", 0)), int(by_cat.get("memset", 0)),
                                                 held, self.advice)
        return [Finding(
            rule_id=self.id,
            title=(f"{fmt.count(n)} synchronous {'copy blocks' if n == 1 else 'copies block'} the host; GPU idle "
                   f"{fmt_ms(int(idle))} inside copy calls" if n else
                   f"GPU idle {fmt_ms(int(idle))} inside copy calls that held the host"
                   + (f" ({'/'.join(nm for nm, _, _ in cl.names[:3])})" if cl and cl.names else ""))
                  + (f" ({premise})" if holds is False else ""),
            message=((f"{fmt.count(n)} blocking memcpy call(s) ({_mib(int(nbytes))}) held the host for {fmt_ms(int(host_ns))}; "
                      f"{fmt.count(gaps)} GPU idle gap(s) opened while one was in progress; {fmt_ms(int(idle))} of GPU idle "
                      "passed inside synchronous copy and memset calls") if n else
                     (f"{fmt_ms(int(idle))} of GPU idle passed while the launching thread was inside copy and memset "
                      "calls that are not blocking copies by NVIDIA's rule (asynchronous calls on pageable memory, "
                      "small host-to-device copies), yet held the host: such a call returns only once the host data "
                      "is staged"))
                    + (": " + "; ".join(f"{nm} {fmt_ms(ns)} (x{fmt.count(k)})" for nm, ns, k in cl.names[:4]) if cl else "")
                    + f". Premise ({self.premise}): "
                    + ("holds, " if holds else "does not hold, ") + premise + ".",
            impact_ns=int(idle), impact_pct=share,
            advice=advice,
            evidence=evidence, evidence_total=int(n), report=trace.label, rank=trace.rank,
            extra=BlockingCopyExtra(
                copies=int(n), bytes=int(nbytes), host_blocked_ns=int(host_ns), idle_gaps=int(gaps), idle_ns=int(idle),
                by_category=cl.by_category if cl else {},
                names=[{"name": nm, "ns": ns, "calls": k} for nm, ns, k in cl.names] if cl else [],
                held_copies=[{"name": h[0], "copies": h[2], "pageable": h[3]} for h in held],
                premise_holds=holds, premise=premise, pinned_advice=pinned),
        )]


_MEMSET_ADVICE = (
    "A memset that holds the host is not a copy and pinning does not help it: a memset on managed or pinned memory "
    "is synchronous with the host whatever the call; set the buffer inside a kernel that already runs, or "
    "allocate it on the device and use cudaMemsetAsync on a stream (prefetch managed buffers before first touch).")
_RESIDENT_ADVICE = (
    "The copies that held the host do not use pageable memory, so pinning changes nothing: issue them with "
    "cudaMemcpyAsync on a stream and synchronize once when the data is needed, or keep the data on the GPU.")


def _held_copy_kinds(trace: Trace, names: list[tuple[str, int, int]]) -> list[tuple[str, int, int, int]]:
    """Per copy call whose idle MEM002 owns (name, idle ns, calls), the copies calls of that name issued and how many
    move pageable host memory (source or destination memory kind, joined through process and correlation id):
    (name, idle ns, copies, pageable copies)."""
    copies = [(n, ns) for n, ns, _ in names if re.match(COPY_CALL_RE, n)]
    if not copies or not trace.has_rows("memcpy"):
        return [(n, ns, 0, 0) for n, ns in copies]
    rows = {str(r[0]): (int(r[1]), int(r[2])) for r in trace.sql("""
        SELECT a.name, COUNT(*), COUNT(*) FILTER (WHERE m.src_kind = 'pageable' OR m.dst_kind = 'pageable')
        FROM memcpy m JOIN cuda_api a ON a.pid = m.pid AND a.correlation_id = m.correlation_id
        WHERE list_contains($names, a.name) GROUP BY a.name""", {"names": [n for n, _ in copies]})}
    return [(n, ns, *rows.get(n, (0, 0))) for n, ns in copies]


def _pinned_premise(copy_ns: int, memset_ns: int, held: list[tuple[str, int, int, int]],
                    pinned_advice: str) -> tuple[bool, bool | None, str, str]:
    """MEM002's premise on the evidence (the idle it owns is inside copy calls: a memset that blocks is not a copy),
    whether pinned memory is the fix (the calls that hold most of that idle copy pageable host memory; None: the
    export records none of their copies), the evidence in words, and the advice that fits."""
    if memset_ns > copy_ns:
        return False, False, (f"{fmt_ms(memset_ns)} of the idle is in memset calls against {fmt_ms(copy_ns)} in copy "
                              "calls, and a memset that blocks (on managed or pinned memory) is not a pageable copy"
                              ), _MEMSET_ADVICE
    known = [h for h in held if h[2]]
    if not known:
        return True, None, ("the export records no copy those calls issued, so whether they move pageable host memory "
                            "(what pinning fixes) is not shown"), pinned_advice
    words = "; ".join(f"{n} {fmt_ms(ns)} of idle, {fmt.count(p)} of its {fmt.count(k)} copies pageable"
                      for n, ns, k, p in known[:4])
    pageable_ns = sum(ns for _, ns, _, p in known if p)
    if 2 * pageable_ns < sum(ns for _, ns, _, _ in known):
        return True, False, (f"the calls that hold most of the idle move no pageable host memory ({words}): pinning "
                             "changes nothing"), _RESIDENT_ADVICE
    return True, True, f"the calls that hold most of the idle move pageable host memory ({words})", pinned_advice


class SyncMemset(Rule):
    """Synchronous memset on pinned host or managed memory.

    *Why it matters*: ``cudaMemset`` on pinned or unified memory is synchronous with the host; it
    serializes the host with the GPU for what is usually a trivial operation.

    *How it is detected*: memset operations on pinned or managed memory whose API call (joined through
    process and correlation id) is a memset without ``Async``. Impact: the GPU time of those memsets.
    """

    id = "MEM003"
    extra_type = MemsetExtra
    name = "memory.sync-memset"
    verdict_kind = "sync_bound"
    next_step = "use cudaMemsetAsync on a stream instead of synchronous memsets"
    round_trip = RoundTrip("in synchronous memsets", "make the memsets asynchronous on the stream")
    category = "memory"
    requires = ("memset", "cuda_api")
    thresholds = {"min_memsets": Threshold(1.0, "count", "report when at least this many memsets are synchronous",
                                           minimum=1.0, maximum=1e9)}
    summary = "Synchronous memset on pinned or managed memory"
    advice = "Use cudaMemsetAsync on a stream, or initialise the buffer inside work that already runs."

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        sql = f"""
            SELECT m.pid, m.device, m.stream, m.start_ns, m.end_ns, m.end_ns - m.start_ns AS dur, a.name,
                   m.mem_kind, m.bytes
            FROM memset m JOIN cuda_api a ON a.pid = m.pid AND a.correlation_id = m.correlation_id
            WHERE m.mem_kind IN ('pinned', 'managed') AND regexp_matches(a.name, '{MEMSET_RE}')
              AND NOT contains(a.name, 'Async')"""  # noqa: S608 - constants and server-made names
        n, total = trace.sql(f"SELECT COUNT(*), COALESCE(SUM(dur), 0) FROM ({sql})")[0]  # noqa: S608
        if n == 0 or n < ctx.params["min_memsets"]:
            return []
        top = trace.sql(f"SELECT * FROM ({sql}) ORDER BY dur DESC, start_ns LIMIT 20")  # noqa: S608
        evidence = _evidence(trace, top, 5, ("mem_kind", "bytes"), (7, 8), 6)
        return [Finding(
            rule_id=self.id,
            title=f"{fmt.count(n)} synchronous memset(s) on pinned/managed memory",
            message=f"{fmt.count(n)} synchronous memset(s) on pinned or managed memory took {fmt_ms(int(total))} of GPU time.",
            impact_ns=int(total), impact_pct=pct(int(total), report_span_ns(trace)),
            advice=self.advice,
            evidence=evidence, evidence_total=int(n), report=trace.label, rank=trace.rank,
            extra=MemsetExtra(memsets=int(n)),
        )]


_UVM = "SELECT pid, device, start_ns, end_ns, copy_kind, bytes FROM memcpy WHERE copy_kind LIKE 'UVM%'"
_KERN = "SELECT pid, device, start_ns, end_ns FROM kernels WHERE start_ns IS NOT NULL AND end_ns >= start_ns"


class UnifiedMemoryMigration(Rule):
    """Unified-memory page migrations, and the GPU idle between them.

    *Why it matters*: with managed memory, pages move on demand; a kernel that touches non-resident
    pages faults and waits while the driver migrates them (fault stalls inside the kernel), a host that
    touches device-resident pages faults them back a batch at a time while the GPU idles between the
    migrations, and migration in both directions (thrashing) can cost more than the computation.

    *How it is detected*: memcpy rows of the unified-memory kinds (``UVM_HtoD``, ``UVM_DtoH``,
    ``UVM_DtoD``): count, bytes and direction. The idle anatomy paints ``uvm_migration`` on the idle between
    two migrations of a device (``analysis.diagnosis.idle_anatomy.uvm_gaps``); this rule owns those instants
    (``owns_idle``, see ``idle_claims``) whatever rule owns the gap around them. Also measured: the time the
    migrations run while no kernel runs (memory-only time, interval algebra on unions) and the fault stalls
    inside kernels: the migrations that overlap a kernel of their device (count, bytes, kernel time overlapped),
    and each such kernel's time from its start until its last page arrived (a warp that touches a missing page
    waits for it; the union per device). Between two migrations to the host (``UVM_DtoH``: the host touching
    device-resident pages), the host either waits on the fault (switched out) or works on the pages it read
    (on the CPU); with the scheduler's events the anatomy names the second ``UVM_DtoH, host on CPU``: owned (the
    GPU idles because of it) but not the migrations' cost (unified-memory-a100: the idle after each read-back
    migration grows with its bytes at 2.1 ns/B, the host's verification loop, while the migrations move those
    bytes at 21 GB/s). Impact: the fault stalls plus the migration-only time plus the owned idle that is not
    host work.

    *Premise*: the migrations cost GPU time (kernels stall on faults, or the migrations and the waits on them
    outweigh the host's work between them); otherwise the finding does not lead the verdict.
    """

    id = "MEM004"
    extra_type = MigrationExtra
    name = "memory.unified-memory-migration"
    verdict_kind = "uvm"
    next_step = "prefetch managed memory to the GPU (cudaMemPrefetchAsync) or copy it explicitly"
    category = "memory"
    requires = ("memcpy",)
    thresholds = {"min_migrations": Threshold(1.0, "count", "report when at least this many migrations happen",
                                              minimum=1.0, maximum=1e9)}
    summary = "Unified-memory page migration traffic and the GPU idle between migrations"
    owns_idle = ("uvm_migration",)
    premise = ("migrations cost the GPU time: kernels wait on page faults, or migrations run or are waited on while "
               "the GPU idles, more than the host works between them")
    advice = (
        "Prefetch managed buffers with cudaMemPrefetchAsync: to the device before the kernels that use them, to "
        "the host (cudaCpuDeviceId) before the host reads the results; add cudaMemAdvise hints (preferred "
        "location, read-mostly), or allocate on the device and copy explicitly with cudaMemcpyAsync.")

    @classmethod
    def verdict_step(cls, finding: Finding) -> str:
        """The step follows the direction of the faults that own the cost: idle between migrations to the host is
        the host faulting device-resident pages back (prefetch them to the CPU before it reads them, or keep the work
        on the device); migrations inside kernels are the GPU faulting (prefetch to the GPU: ``next_step``)."""
        extra = finding.extra if isinstance(finding.extra, MigrationExtra) else None
        by_dir = (extra.idle_by_direction if extra is not None else None) or {}
        to_host = int((by_dir.get("UVM_DtoH") or {}).get("ns") or 0)
        overlap = extra.kernel_overlap_ns if extra is not None else None
        on_gpu = int(overlap or 0) + int((by_dir.get("UVM_HtoD") or {}).get("ns") or 0)
        if to_host > on_gpu:
            return ("prefetch the managed buffers to the host (cudaMemPrefetchAsync to cudaCpuDeviceId) before the "
                    "host reads them, or keep that work on the GPU so the pages stay there")
        return cls.next_step

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        n, nbytes, total, htod, dtoh, b_htod, b_dtoh = trace.sql(f"""
            SELECT COUNT(*), COALESCE(SUM(bytes), 0), COALESCE(SUM(end_ns - start_ns), 0),
                   COUNT(*) FILTER (WHERE copy_kind = 'UVM_HtoD'), COUNT(*) FILTER (WHERE copy_kind = 'UVM_DtoH'),
                   COALESCE(SUM(bytes) FILTER (WHERE copy_kind = 'UVM_HtoD'), 0),
                   COALESCE(SUM(bytes) FILTER (WHERE copy_kind = 'UVM_DtoH'), 0)
            FROM ({_UVM})""")[0]  # noqa: S608 - constants
        if n == 0 or n < ctx.params["min_migrations"]:
            return []
        has_kernels = trace.has_rows("kernels")
        kern = _KERN if has_kernels else "SELECT pid, device, start_ns, end_ns FROM memcpy WHERE FALSE"
        mig = "SELECT pid, device, start_ns, end_ns FROM memcpy WHERE copy_kind LIKE 'UVM%'"
        union = f"""
            SELECT COALESCE(SUM(b.union_ns - COALESCE(k.union_ns, 0)), 0)
            FROM ({union_of_sql(kern + " UNION ALL " + mig)}) b LEFT JOIN ({union_of_sql(kern)}) k
              ON k.pid IS NOT DISTINCT FROM b.pid AND k.device IS NOT DISTINCT FROM b.device"""  # noqa: S608
        # Migration-only time: |migrations u kernels| - |kernels|, per unit, from union lengths.
        alone = int(trace.scalar(union) or 0)
        # Fault stalls: |migrations n kernels| = |migrations| + |kernels| - |migrations u kernels|, per unit.
        mig_union = int(trace.scalar(f"SELECT COALESCE(SUM(union_ns), 0) FROM ({union_of_sql(mig)})") or 0)  # noqa: S608
        overlapped = max(0, mig_union - alone)
        in_kernel, in_kernel_bytes = trace.sql(f"""
            SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM ({_UVM}) m
            WHERE EXISTS (SELECT 1 FROM ({kern}) k WHERE k.pid IS NOT DISTINCT FROM m.pid
                          AND k.device IS NOT DISTINCT FROM m.device
                          AND k.start_ns < m.end_ns AND k.end_ns > m.start_ns)""")[0]  # noqa: S608 - constants
        # Fault stalls: a kernel whose pages arrive while it runs waits on them from its start until the last one
        # has arrived (its compute is not told apart), per unit as a union (concurrent kernels counted once).
        stalled = f"""
            SELECT k.pid, k.device, k.start_ns, LEAST(k.end_ns, MAX(m.end_ns)) AS end_ns
            FROM ({kern}) k JOIN ({mig}) m ON k.pid IS NOT DISTINCT FROM m.pid AND k.device IS NOT DISTINCT FROM m.device
              AND m.start_ns < k.end_ns AND m.end_ns > k.start_ns
            GROUP BY k.pid, k.device, k.start_ns, k.end_ns"""  # noqa: S608 - constants
        stall = int(trace.scalar(f"SELECT COALESCE(SUM(union_ns), 0) FROM ({union_of_sql(stalled)})") or 0)  # noqa: S608
        c = claims(trace, ctx.claimers).by_rule.get(self.id)
        idle = c.ns if c is not None else 0
        names = c.names if c is not None else []
        # The idle between migrations to the host while the host ran on the CPU is its work on the pages it read
        # back (idle_anatomy.HOST_WORK_SUFFIX): owned (the GPU idles because of it), not the migrations' cost.
        worked = sum(ns for name, ns, _ in names if name.endswith(HOST_WORK_SUFFIX))
        by_dir: dict[str, tuple[int, int]] = {}
        for name, ns, k in names:
            if not name.endswith(HOST_WORK_SUFFIX):
                by_dir[name] = (by_dir.get(name, (0, 0))[0] + ns, by_dir.get(name, (0, 0))[1] + k)
        waited = idle - worked
        impact = stall + alone + waited
        holds = stall > 0 or alone + waited >= worked
        top = trace.sql("""SELECT pid, device, stream, start_ns, end_ns, end_ns - start_ns AS dur, copy_kind, bytes
                           FROM memcpy WHERE copy_kind LIKE 'UVM%' ORDER BY dur DESC, start_ns LIMIT 20""")
        evidence = _evidence(trace, top, 5, ("bytes",), (7,), 6)
        before = ("; " + "; ".join(f"{fmt_ms(ns)} of it before {name} migrations" for name, (ns, _) in by_dir.items())
                  if by_dir else "")
        host = (f" Between migrations to the host the host ran on the CPU {fmt_ms(worked)} (switched out "
                f"{fmt_ms(by_dir.get('UVM_DtoH', (0, 0))[0])}): its own work on the pages it read back, not counted."
                if worked else "")
        premise = (f"{fmt_ms(stall)} of kernel time waiting on page faults, {fmt_ms(alone)} of migration with no "
                   f"kernel running and {fmt_ms(waited)} of idle waiting on migrations, against {fmt_ms(worked)} of "
                   "host work between them")
        return [Finding(
            rule_id=self.id,
            title=(f"Unified-memory migrations: {fmt_ms(impact)} of GPU time, kernels waiting on page faults "
                   f"{fmt_ms(stall)}; {fmt.count(n)} migrations ({_mib(int(nbytes))}), {fmt.count(in_kernel)} inside kernels"),
            message=(f"{fmt.count(n)} page migrations ({fmt.count(htod)} to the device, {_mib(int(b_htod))}; "
                     f"{fmt.count(dtoh)} to the host, "
                     f"{_mib(int(b_dtoh))}) moved {_mib(int(nbytes))} in {fmt_ms(int(total))}. {fmt.count(in_kernel)} "
                     f"migrations ({_mib(int(in_kernel_bytes))}) ran inside kernels ({fmt_ms(overlapped)} of kernel "
                     f"time): those kernels waited on page faults {fmt_ms(stall)}, from their start until their last "
                     f"page arrived. {fmt_ms(alone)} of migration ran while no kernel ran. The GPU idled "
                     f"{fmt_ms(idle)} between migrations, {fmt_ms(waited)} of it waiting on them{before}.{host} "
                     f"Cost: {fmt_ms(stall)} + {fmt_ms(alone)} + {fmt_ms(waited)} = {fmt_ms(impact)}."),
            impact_ns=impact, impact_pct=pct(impact, report_span_ns(trace)),
            advice=self.advice,
            evidence=evidence, evidence_total=int(n), report=trace.label, rank=trace.rank,
            extra=MigrationExtra(
                migrations=int(n), bytes=int(nbytes), migration_ns=int(total), to_device=int(htod), to_host=int(dtoh),
                bytes_to_device=int(b_htod), bytes_to_host=int(b_dtoh), idle_ns=int(idle), migration_only_ns=int(alone),
                idle_waited_ns=int(waited), host_work_ns=int(worked), fault_stall_ns=int(stall),
                premise_holds=holds, premise=premise,
                idle_by_direction={k: {"ns": int(v[0]), "gaps": int(v[1])} for k, v in by_dir.items()},
                in_kernel_migrations=int(in_kernel), in_kernel_bytes=int(in_kernel_bytes),
                kernel_overlap_ns=int(overlapped)),
        )]
