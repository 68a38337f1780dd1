"""Kernels of two runs compared per launch and per step: each kernel's launch durations tested
(``analysis.views.significance``), and, when both runs have steps, its time in each step (the sum of its
launches that start inside the step; ``analysis.views.compare_samples.kernel_per_step``) tested over the steps,
its launches per step (counted inside the steps), its totals beside; and labels that keep kernels apart.

Per launch and per step answer different questions: a kernel launched more often per step, or whose launches
wait longer in some steps, costs more per step with the same median launch. A kernel is listed as changed
when either test says so (``changed_by``: which), and the time that moves per step (per run without steps)
is above an absolute floor: a share of the kernel time per step, so that a 10 % change of a 2 us kernel
launched once does not crowd the list. A kernel on one side only is listed (``status`` new or gone) when its
time is above that floor.
"""

from __future__ import annotations

import re
from typing import Literal, TypedDict

import numpy as np

from analysis.model.kernel_names import short_kernel_name
from analysis.views.significance import SampleComparison, compare_samples

ABS_FLOOR_SHARE = 0.001     # of the kernel time per step (or per run): smaller changes are not listed
MAX_ROWS = 100              # changed kernels listed
TABLE_ROWS = 50             # the per-launch table: the kernels with the most time on either side
LABEL_LIMIT = 90


_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
MAX_TOKENS = 4


class SidesPerStep(TypedDict):
    """A kernel's launches per step in each run."""

    base: float
    head: float


class KernelDiff(TypedDict):
    """One kernel of two runs compared (``diff_kernels``): its name and label, whether it changed (or is new, or
    gone), its launches and total time in each run, its launches per step (with steps), its launches' durations
    tested, its time per step tested (with steps in both), which tests said it changed, and the time that moved
    per step (per run without steps)."""

    name: str
    label: str
    status: Literal["changed", "unchanged", "new", "gone"]
    base_count: int
    head_count: int
    base_total_ns: int
    head_total_ns: int
    launches_per_step: SidesPerStep | None
    per_launch_ns: SampleComparison
    per_step_ns: SampleComparison | None
    changed_by: list[str]
    moved_ns: float


class NoiseFloor(TypedDict):
    """What a kernel's change must pass to be listed: the effect-size floor (``pct``), the absolute floor on the
    time that moves, per step or per run, the tests made, and how many kernels were below it of those compared."""

    pct: float
    abs_ns: float
    per: Literal["step", "run"]
    tests: list[str]
    kernels_below_noise: int
    kernels_compared: int


def _tokens(name: str) -> list[str]:
    """The identifiers and numbers of a kernel's full name, each once, in order of appearance."""
    return list(dict.fromkeys(_TOKEN.findall(name)))


def distinct_labels(names: list[str], limit: int = LABEL_LIMIT) -> dict[str, str]:
    """A readable label per kernel name: its short name; where several kernels share one (instantiations
    of one template), followed by the few words of the full name that tell it from the others (the rarest
    in the group first: ``elementwise_kernel<…> · 2, MulFunctor, float``); ``#n`` when no words do."""
    short = {n: short_kernel_name(n, limit) for n in names}
    groups: dict[str, list[str]] = {}
    for n in sorted(names):
        groups.setdefault(short[n], []).append(n)
    out = {}
    for label, members in groups.items():
        if len(members) == 1:
            out[members[0]] = label
            continue
        toks = {n: _tokens(n) for n in members}
        sets = {n: set(t) for n, t in toks.items()}
        freq: dict[str, int] = {}
        for t in sets.values():
            for w in t:
                freq[w] = freq.get(w, 0) + 1
        for i, n in enumerate(members):
            others = [sets[m] for m in members if m != n]
            cands = sorted((w for w in toks[n] if freq[w] < len(members)), key=lambda w: (freq[w], toks[n].index(w)))
            chosen: list[str] = []
            for w in cands:
                if not any(set(chosen) <= o for o in others) or len(chosen) >= MAX_TOKENS:
                    break
                chosen.append(w)
            unique = bool(chosen) and not any(set(chosen) <= o for o in others)
            words = ", ".join(sorted(chosen, key=toks[n].index))
            out[n] = f"{label} · {words}" if unique else f"{label} #{i + 1}"
    return out


def diff_kernels(base: dict[str, np.ndarray], head: dict[str, np.ndarray], noise_pct: float,
                 base_steps: int, head_steps: int, base_per_step: dict[str, np.ndarray] | None = None,
                 head_per_step: dict[str, np.ndarray] | None = None,
                 launches_in_steps: tuple[dict[str, int], dict[str, int]] | None = None,
                 ) -> tuple[list[KernelDiff], list[KernelDiff], NoiseFloor]:
    """(changed kernels, the per-launch table, the noise floor). ``base``/``head``: launch durations by
    name; ``*_steps``: the steps each run's samples cover (0: none, compare per run); ``*_per_step``: each
    kernel's time in every step of the run's reports (``merge_per_step``), when both runs have steps;
    ``launches_in_steps``: each kernel's launches inside those steps, per run."""
    bps, hps = base_per_step or {}, head_per_step or {}
    per_step = base_steps > 0 and head_steps > 0
    by_step = per_step and bool(bps) and bool(hps)
    empty = np.empty(0, dtype=np.int64)
    if by_step:  # what lies inside the steps, over the (report, step) samples
        div_b, div_h = len(next(iter(bps.values()))), len(next(iter(hps.values())))
        time_b = sum(int(v.sum()) for v in bps.values()) / div_b
        time_h = sum(int(v.sum()) for v in hps.values()) / div_h
    else:
        div_b, div_h = (base_steps, head_steps) if per_step else (1, 1)
        time_b = sum(int(v.sum()) for v in base.values()) / div_b
        time_h = sum(int(v.sum()) for v in head.values()) / div_h
    names = sorted(set(base) | set(head))
    labels = distinct_labels(names)
    floor_abs = ABS_FLOOR_SHARE * max(time_b, time_h)
    rows: list[KernelDiff] = []
    for name in names:
        b, h = base.get(name, empty), head.get(name, empty)
        stats = compare_samples(b, h, noise_pct)
        tb, th = int(b.sum()), int(h.sum())
        sb, sh = (bps.get(name, np.zeros(div_b, dtype=np.int64)), hps.get(name, np.zeros(div_h, dtype=np.int64))) \
            if by_step else (empty, empty)
        step_stats = compare_samples(sb, sh, noise_pct) if by_step and sb.any() and sh.any() else None
        in_b, in_h = (float(sb.sum()), float(sh.sum())) if by_step else (tb, th)
        nb_in, nh_in = ((launches_in_steps[0].get(name, 0), launches_in_steps[1].get(name, 0))
                        if by_step and launches_in_steps is not None else (len(b), len(h)))
        # What the change costs per step (per run): the share of the head's time that the change added
        # (or saved), from the estimated ratio (per step when the steps say it changed).
        by: list[str] = []
        status: Literal["changed", "unchanged", "new", "gone"]
        if len(b) and len(h):
            lead = step_stats if step_stats is not None and step_stats["changed"] else stats
            ratio = 1.0 + (lead["delta_pct"] or 0.0) / 100.0
            moved = in_h / div_h * (1.0 - 1.0 / ratio) if ratio > 0 else 0.0
            by = [k for k, st in (("per_launch", stats), ("per_step", step_stats)) if st is not None and st["changed"]]
            status = "changed" if by and abs(moved) > floor_abs else "unchanged"
        else:
            moved = in_h / div_h - in_b / div_b
            status = ("new" if len(h) else "gone") if abs(moved) > floor_abs else "unchanged"
        rows.append({
            "name": name, "label": labels[name], "status": status,
            "base_count": int(len(b)), "head_count": int(len(h)), "base_total_ns": tb, "head_total_ns": th,
            "launches_per_step": ({"base": round(nb_in / div_b, 3), "head": round(nh_in / div_h, 3)}
                                  if per_step else None),
            "per_launch_ns": stats, "per_step_ns": step_stats, "changed_by": by if status == "changed" else [],
            "moved_ns": round(moved, 1),
        })
    def moved_of(r: KernelDiff) -> float:
        return abs(float(r["moved_ns"]))

    def time_of(r: KernelDiff) -> float:
        return max(int(r["base_total_ns"]) / div_b, int(r["head_total_ns"]) / div_h)

    changed = sorted((r for r in rows if r["status"] != "unchanged"), key=lambda r: (-moved_of(r), r["name"]))
    table = sorted(rows, key=lambda r: (-time_of(r), r["name"]))
    shown = {r["name"] for r in changed[:MAX_ROWS]}
    table = table[:TABLE_ROWS] + [r for r in table[TABLE_ROWS:] if r["name"] in shown]
    noise: NoiseFloor = {"pct": noise_pct, "abs_ns": round(floor_abs, 1), "per": "step" if per_step else "run",
                          "tests": ["per_launch", "per_step"] if by_step else ["per_launch"],
                          "kernels_below_noise": len(rows) - len(changed), "kernels_compared": len(rows)}
    return changed[:MAX_ROWS], table, noise
