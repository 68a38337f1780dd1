"""KRN003: kernels whose durations spread widely for the same launch, with the slow instances as evidence."""

from __future__ import annotations

from analysis import fmt
from analysis.diagnosis.findings import Evidence, Finding
from analysis.diagnosis.rules.base import MAX_US, Rule, RuleContext, Threshold
from analysis.diagnosis.rules.nsys.common import fmt_ms, load_sql, nvtx_at, pct, report_span_ns
from analysis.diagnosis.rules.nsys.tensorcores import name_list, simt_fp32_names
from analysis.loops.trend import TREND_MIN, TREND_RHO, is_trend, trend_words
from analysis.model.trace import Trace, inline_params
from analysis.results import DurationOutlierExtra

# The temporary table of the flagged launch shapes (outliers.sql), for the duration of one report's check.
_SHAPES = "_gp_krn003_shapes"


class KernelOutliers(Rule):
    """Kernel duration outliers: the same kernel, launched the same way, sometimes runs much longer.

    *Why it matters*: a kernel with the same name, grid and block on the same GPU normally does the
    same work in about the same time. When some instances take several times the median, something
    outside the kernel slowed them: contention with concurrent kernels or communication for SMs and
    memory bandwidth, clock throttling (power, temperature), cold caches and first-launch costs
    (module loading, JIT, autotuning), or data-dependent work the launch shape does not show. Whatever
    the cause, that time is above what the kernel needs.

    *How it is detected*: compute kernels (NCCL kernels are left to COMM001/COMM002: their duration
    includes waiting for peers) grouped by process, device, name, grid and block. A group is judged
    when it has at least ``min_instances`` instances and a median of at least ``min_median_us`` (below
    that, fixed launch costs and clock changes dominate the duration). Percentiles are ``quantile_disc``:
    the duration at rank floor(q x (n - 1)) of the sorted durations. A group is *unstable* when its
    p90 is at least ``max_spread`` times its p10; an instance is an *outlier* when it lasts at least
    ``outlier_factor`` times its group's median. Impact: the time above the median of the outliers and,
    in unstable groups, of every instance above the median (what the kernel would save if each of
    those instances ran at its median), reported when at least ``min_excess_us``. The kernel that takes
    the largest share of compute time is named (dominance), so a spread in it weighs accordingly.

    *Premise*: the durations spread around a level. A launch shape whose durations fall or rise steadily over
    the run (Spearman's rank correlation with launch order at least ``analysis.loops.trend.TREND_RHO`` in size,
    as the update kernel of an elimination whose matrix shrinks each step) follows its work: when such trends
    hold most of the time above the median the finding says "trend, not spread" and does not lead.

    Ownership: this is kernel time, not idle time: it never competes with the idle-gap rules
    (SYNC001, MEM002, GPU001, KRN001, GPU002) or with MEM005's memory-only time. The FP32 SIMT
    GEMMs/convolutions KRN002 reports are left out here (KRN002 > KRN003), so no kernel is counted twice.
    """

    id = "KRN003"
    extra_type = DurationOutlierExtra
    name = "kernel.duration-outliers"
    verdict_kind = "gpu_bound_kernel"
    next_step = "profile the slow instances of the spread kernel with ncu"
    category = "kernel"
    requires = ("kernels",)
    thresholds = {
        "min_instances": Threshold(20.0, "count", "fewest instances of a kernel launch shape to judge its spread",
                                   minimum=1.0, maximum=1e9),
        "min_median_us": Threshold(10.0, "us", "a launch shape whose median is shorter is not judged",
                                   minimum=0.0, maximum=MAX_US),
        "max_spread": Threshold(2.0, "ratio", "a shape is unstable when its p90 is at least this times its p10",
                                minimum=1.0, maximum=1e6),
        "outlier_factor": Threshold(3.0, "ratio", "an instance is an outlier at this many times its median",
                                    minimum=1.0, maximum=1e6),
        "min_excess_us": Threshold(1000.0, "us", "report when the time above the medians adds up to at least this",
                                   minimum=0.0, maximum=MAX_US),
    }
    summary = "Same kernel, same launch shape, widely spread durations"
    premise = "the durations spread around a level, not a trend over the run"
    advice = (
        "See what runs beside the slow instances: communication or other streams competing for SMs (fewer"
        " NCCL channels, schedule apart), clock throttling (nvidia-smi -q -d PERFORMANCE), warm-up (skip "
        "first iterations, cache autotuning), or data-dependent work (bucket inputs).")

    def check_report(self, trace: Trace, ctx: RuleContext) -> list[Finding]:
        bind = {"min_n": int(ctx.params["min_instances"]), "min_median_ns": ctx.params["min_median_us"] * 1000,
                "spread": ctx.params["max_spread"], "factor": ctx.params["outlier_factor"]}
        simt = simt_fp32_names(trace)
        sql = load_sql("outliers.sql").replace("{exclude}", f"name NOT IN ({name_list(simt)})" if simt else "TRUE")
        # The shapes first, on their own (outliers.sql: the later joins then build on them, not on the kernels).
        make = f"CREATE OR REPLACE TEMP TABLE {_SHAPES} AS " + sql.replace("{shapes}", "shapes")
        trace.con.execute(*inline_params(make + " SELECT * FROM shapes", bind))  # noqa: S608 - constant text
        try:
            return self._findings(trace, ctx, sql.replace("{shapes}", _SHAPES), bind)
        finally:
            trace.con.execute(f"DROP TABLE IF EXISTS {_SHAPES}")

    def _findings(self, trace: Trace, ctx: RuleContext, sql: str, bind: dict) -> list[Finding]:
        groups = trace.sql(sql + """
            SELECT f.gid, f.name, f.pid, f.device, [f.grid_x, f.grid_y, f.grid_z], [f.block_x, f.block_y, f.block_z],
                   f.n, f.total, f.p10, f.p50, f.p90, f.mx, f.unstable,
                   COALESCE(SUM(x.excess), 0), COUNT(x.row_id), COUNT(x.row_id) FILTER (WHERE x.outlier)
            FROM _gp_krn003_shapes f LEFT JOIN flagged x ON x.gid = f.gid GROUP BY ALL ORDER BY 14 DESC, f.gid""", bind)  # noqa: S608 - constant text
        total = sum(int(g[13]) for g in groups)
        if not groups or total < ctx.params["min_excess_us"] * 1000:
            return []
        top = trace.sql(sql + """
            SELECT x.gid, k.pid, k.device, k.stream, k.start_ns, k.end_ns, k.name, x.excess, x.outlier
            FROM flagged x JOIN kernels k ON k.rowid = x.row_id
            ORDER BY x.excess DESC, k.start_ns LIMIT 20""", bind)  # noqa: S608 - constant text
        by_gid = {g[0]: g for g in groups}
        nvtx = nvtx_at(trace, [(r[1], r[4]) for r in top])
        evidence = tuple(
            Evidence(start_ns=int(r[4]), end_ns=int(r[5]), device=r[2], stream=r[3], pid=r[1], rank=trace.rank,
                     name=r[6], nvtx=n, value_ns=int(r[7]),
                     detail={"duration_ns": int(r[5]) - int(r[4]), "median_ns": int(by_gid[r[0]][9]),
                             "p10_ns": int(by_gid[r[0]][8]), "p90_ns": int(by_gid[r[0]][10]),
                             "grid": by_gid[r[0]][4], "block": by_gid[r[0]][5], "outlier": bool(r[8])})
            for r, n in zip(top, nvtx, strict=True))
        # A trend is not spread: durations that fall or rise steadily over the run follow the work (premise).
        rhos = {int(gid): float(r) for gid, r in trace.sql(sql + """
            SELECT gid, corr(rt, rd) FROM (
                SELECT f.gid, row_number() OVER (PARTITION BY f.gid ORDER BY k.start_ns, k.row_id) AS rt,
                       (rank() OVER (PARTITION BY f.gid ORDER BY k.dur) + COUNT(*) OVER (PARTITION BY f.gid) + 1
                        - rank() OVER (PARTITION BY f.gid ORDER BY k.dur DESC)) / 2.0 AS rd
                FROM k JOIN _gp_krn003_shapes f ON k.key = f.key)
            GROUP BY gid HAVING COUNT(*) >= $trend_min""", {**bind, "trend_min": TREND_MIN})  # noqa: S608 - constant text
            if r is not None}
        trending = [g for g in groups if is_trend(rhos.get(int(g[0])))]
        trend_ns = sum(int(g[13]) for g in trending)
        holds = 2 * trend_ns < total
        premise = ("; ".join(f"{g[1]}: " + trend_words(rhos[int(g[0])], int(g[6])) for g in trending[:3])
                   + (": the work changes, not spread" if not holds else f": {fmt_ms(trend_ns)} of the time above "
                      "the median is that trend, not spread")) if trending else (
            "no launch shape's durations trend over the run (rank correlation below "
            f"{fmt.exact(TREND_RHO)} in size): they spread around a level")
        flagged = sum(int(g[14]) for g in groups)
        outliers = sum(int(g[15]) for g in groups)
        unstable = sum(1 for g in groups if g[12])
        dominant = _dominant(trace)
        worst = groups[0]
        dom = (f" The largest kernel, {dominant['name']}, takes {fmt.pct(dominant['share_pct'])} of compute kernel time."
               if dominant else "")
        share = pct(total, report_span_ns(trace))
        return [Finding(
            rule_id=self.id,
            title=(f"Kernel durations spread: {fmt_ms(total)} above the median in {fmt.count(len(groups))} kernel launch shape(s)"
                   if holds else f"Kernel durations trend, not spread: {premise}"),
            message=(f"{fmt.count(len(groups))} kernel launch shape(s) ({fmt.count(unstable)} with p90 at least "
                     f"{fmt.exact(ctx.params['max_spread'])}x p10) ran {fmt.count(flagged)} instance(s) above their median, "
                     f"{fmt.count(outliers)} of them at least "
                     f"{fmt.exact(ctx.params['outlier_factor'])}x it, {fmt_ms(total)} in all. Worst: {worst[1]} "
                     f"(n={fmt.count(worst[6])}, p10 {fmt_ms(worst[8])}, median {fmt_ms(worst[9])}, p90 {fmt_ms(worst[10])}, "
                     f"max {fmt_ms(worst[11])}).{dom} Premise ({self.premise}): "
                     + ("holds, " if holds else "does not hold, ") + premise + "."),
            impact_ns=total, impact_pct=share,
            advice=self.advice,
            evidence=evidence, evidence_total=flagged, report=trace.label, rank=trace.rank,
            extra=DurationOutlierExtra(
                shapes=[{"name": g[1], "pid": g[2], "device": g[3], "grid": g[4], "block": g[5],
                         "count": int(g[6]), "total_ns": int(g[7]), "p10_ns": int(g[8]), "median_ns": int(g[9]),
                         "p90_ns": int(g[10]), "max_ns": int(g[11]), "unstable": bool(g[12]),
                         "excess_ns": int(g[13]), "flagged": int(g[14]), "outliers": int(g[15])}
                        for g in groups[:20]],
                shapes_total=len(groups), dominant_kernel=dominant, trend_ns=trend_ns,
                trends=[{"name": g[1], "rank_correlation": round(rhos[int(g[0])], 4)} for g in trending[:20]],
                premise_holds=holds, premise=premise),
        )]


def _dominant(trace: Trace) -> dict | None:
    """The compute kernel name with the largest share of compute kernel time, with that share."""
    row = trace.sql("""
        SELECT name, SUM(end_ns - start_ns) AS t, SUM(SUM(end_ns - start_ns)) OVER () AS total, COUNT(*)
        FROM kernels WHERE category = 'compute' AND end_ns >= start_ns AND name IS NOT NULL
        GROUP BY name ORDER BY t DESC, name LIMIT 1""")
    if not row or not row[0][2]:
        return None
    name, t, total, n = row[0]
    return {"name": name, "total_ns": int(t), "count": int(n), "share_pct": round(100.0 * float(t) / float(total), 3)}
