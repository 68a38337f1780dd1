"""NCU010: far from the roofline: neither compute- nor memory-bound, well under the attainable FLOP/s."""

from __future__ import annotations

from collections.abc import Mapping

from analysis import fmt
from analysis.diagnosis.ncu.memory import story
from analysis.diagnosis.ncu.memory_metrics import PRECISION_LABEL
from analysis.diagnosis.rules.base import Threshold
from analysis.diagnosis.rules.ncu.common import Hit, NcuRule
from analysis.model.ncu_metrics import Launch, issue_slot_bound

ADVICE = ("The kernel is limited by neither math nor bandwidth: look for latency (dependent chains of loads "
          "or math, see NCU008 and the warp stalls of NCU002), a launch that does not fill the GPU (NCU006), "
          "low occupancy (NCU003), or synchronization; then unroll independent work and give each SM more warps.")


def _at(roof: dict) -> str:
    level = roof["roof"] if roof["roof"] in ("dram", "l2") else "dram"
    ai = roof.get(f"intensity_{level}")
    return f" at {fmt.number(ai)} FLOP per {level.upper()} byte" if ai is not None else ""


class FarFromRoofline(NcuRule):
    """Far from the roofline.

    *Why it matters*: the roofline bounds a kernel's FLOP/s by min(peak FLOP/s of its precision, arithmetic
    intensity x peak bandwidth). A kernel well below that bound uses neither its math units nor its memory
    bandwidth; what holds it back is latency, launch configuration or dependency chains.

    *How it is detected*: as Nsight Compute's roofline chart: FLOPs from
    ``sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum`` (FMA = 2, half2 x2, HFMA2 x4) and
    tensor-core ``sm__ops_path_tensor_src_*.sum``; intensity per DRAM byte (``dram__bytes.sum``) and per L2
    byte (``lts__t_bytes.sum``); peaks from the report (``*.peak_sustained`` x clock), implied by ncu's
    percentages, or the architecture table. Fires when achieved FLOP/s are under 50% of the lowest roof and
    no unit reaches 60% of its peak (ncu's SOLBottleneck latency threshold). Speedup (upper bound): the
    distance to the roof, 1 - achieved / attainable, capped by ncu's issue-slot bound. NCU005 classifies from
    speed-of-light throughput; this rule places the kernel's FLOPs under its roof.
    """

    id = "NCU010"
    name = "ncu.far-from-roofline"
    category = "compute"
    gain_role = "symptom"
    cause_order = None  # the distance to the roofline
    summary = "Achieved FLOP/s far below the roofline while no unit is busy"
    advice = "Find the latency (NCU002/NCU008), fill the GPU (NCU006), raise occupancy (NCU003)."
    label = "Far from the roofline"
    # The roofline sections draw charts; their instruction counts reach a CSV only when requested by name.
    collect = ("--section SpeedOfLight --section SpeedOfLight_RooflineChart --metrics "
               "sm__sass_thread_inst_executed_op_dadd_pred_on.sum,sm__sass_thread_inst_executed_op_dmul_pred_on.sum,"
               "sm__sass_thread_inst_executed_op_dfma_pred_on.sum,sm__sass_thread_inst_executed_op_fadd_pred_on.sum,"
               "sm__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum,"
               "sm__sass_thread_inst_executed_op_hfma_pred_on.sum,dram__bytes.sum,lts__t_bytes.sum")
    thresholds = {
        "max_roof_share": Threshold(0.5, "ratio", "report achieved FLOP/s below this share of the attainable",
                                    minimum=0.0, maximum=1.0),
        "busy_pct": Threshold(60.0, "%", "no unit may reach this share of its peak",
                              minimum=0.0, maximum=100.0),
    }

    def evaluate(self, launch: Launch, params: Mapping[str, float]) -> list[Hit] | None:
        memory = story(launch)
        roof = memory["roofline"]
        if not roof or None in (roof.get("pct_of_roof"), roof.get("achieved_flops"), roof.get("attainable_flops")) \
                or not roof.get("flops_total"):
            return None
        b = memory["bound"]["numbers"]
        busiest = max([v for v in (b["busiest_level_pct"], b["compute_pct"]) if v is not None], default=None)
        share = roof["pct_of_roof"] / 100.0
        if share >= params["max_roof_share"] or (busiest is not None and busiest >= params["busy_pct"]):
            return []
        speedup = 1.0 - share
        cap = issue_slot_bound(launch)
        if cap is not None:
            speedup = min(speedup, cap)
        prec = PRECISION_LABEL.get(roof["precision"], roof["precision"])
        roof_name = {"compute": f"{prec} peak", "dram": "DRAM bandwidth roof", "l2": "L2 bandwidth roof"}[roof["roof"]]
        detail = {k: roof.get(k) for k in ("achieved_flops", "attainable_flops", "pct_of_roof", "roof", "precision",
                                           "intensity_dram", "intensity_l2", "compute_peak_known")}
        detail["busiest_unit_pct"] = busiest
        hw = memory["hardware"]
        detail.update({"cc": hw["cc"], "cc_source": hw.get("cc_source"), "cc_basis": hw.get("cc_basis"),
                       "compute_roof_unknown": roof.get("compute_roof_unknown")})
        if not roof.get("compute_peak_known"):
            peaks = (f"; the compute roof is unknown ({roof.get('compute_roof_unknown') or 'no peak for this precision'})"
                     ", so this judges against the memory roof alone")
        elif hw.get("cc_source") == "inferred":
            peaks = (f"; peaks from the compute capability {hw['cc']} table, the architecture inferred from "
                     f"{hw.get('cc_basis')} (no device attributes)")
        else:
            peaks = ""
        return [Hit("roofline", 100.0 * speedup, "Far from the roofline",
                    f"{fmt.si(roof['achieved_flops'], 'FLOP/s')} ({prec}) is {fmt.pct(100 * share)} of the "
                    f"{fmt.si(roof['attainable_flops'], 'FLOP/s')} the {roof_name} allows{_at(roof)}; no unit is above "
                    f"{fmt.pct(params['busy_pct'])} of its peak{peaks}", ADVICE, detail, "upper_bound")]
