"""Compare `goodput analyze --format json` on the corpus with snapshots taken before a change, by kind of change.

    .venv/bin/python scripts/findings_diff.py SNAPSHOT_DIR [EXPORT_NAME ...]

SNAPSHOT_DIR holds ``<export file name>.json`` per corpus export (``goodput analyze --format json
../shared/corpus/nsys/<name>``, run from the repository root). Each difference is put in the kind of change
that explains it (the ``EXPECTED`` patterns below, one per intended change); anything else is printed as
UNEXPECTED and makes the exit status 1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path("../shared/corpus/nsys")  # relative, as the snapshots were taken: file names appear in the output

# (kind, pattern on "path: change") of the intended changes.
EXPECTED = [
    # GPU001 says what the host was doing in the idle it keeps (``by_category``, the anatomy's unclaimed
    # categories of its gaps, adding up to its impact); the verdict's unrecorded idle is its ``none``.
    ("GPU001's kept idle by anatomy category",
     r"^\.(findings\[rule=GPU001/[^\]]*\]\.(message|by_category(\.\w+)?)|(reports\[\d+\]\.)?verdict\.text)(:| ).*"),
    # HOST001 owns the idle inside OS runtime calls (``os_io``, ``os_wait``, ``os_other``) and off CPU (``off_cpu``; it
    # runs on exports with scheduler events and no OS runtime trace too) in any gap; GPU001 keeps
    # the rest of the gaps OS calls mostly cover; the verdict leads with a recorded cause owning a fifth of the
    # idle over idle with nothing recorded (nvFuser: compilation).
    ("HOST001 owns the idle inside OS calls; a recorded cause leads the verdict",
     r"^\.(findings\[rule=(HOST001|GPU001|GPU002|KRN001)/[^\]]*\](\.\S+)?|rules\[id=(GPU001|GPU002|KRN001|HOST001)\]"
     r"\.findings|rules\[id=HOST001\]\.(status|reason)|findings\[rule=HOST002/[^\]]*\]\.by_owner\.\w+|(reports\[\d+\]\.)?verdict\.\w+"
     r"|reports\[\d+\]\.iterations\.anatomy\.slowest_steps\[\d+\]\.(owner|cause))(:| ).*"),
    # The idle anatomy paints ``off_cpu`` where a speaking thread was switched out by the scheduler (SCHED_EVENTS)
    # and nothing more specific was recorded: time moves from ``none`` to ``off_cpu`` in the reports' anatomies
    # and in PHASE001's start-up anatomy and message; HOST001 owns ``off_cpu`` (see the HOST001 entry).
    ("off_cpu: idle with the speaking thread switched out is painted off_cpu, not none (#23)",
     r"^\.(reports\[\d+\]\.idle_anatomy\[\d+\]\.categories(\[\d+\]\.\w+)?"
     r"|findings\[rule=PHASE001/[^\]]*\]\.(idle_anatomy\.categories|message))(:| ).*"),
    # MEM004 owns the idle between unified-memory migrations (``uvm_migration``, painted only where no host
    # activity is recorded): its finding gains count, bytes, direction, owned idle and in-kernel migrations; the
    # anatomy repaints that idle, which the gap owners (GPU001 ...) and the verdict no longer keep.
    ("MEM004 owns the idle between unified-memory migrations",
     r"^\.(findings\[rule=MEM004/[^\]]*\](\.\S+)?|reports\[\d+\]\.idle_anatomy\[\d+\]\.categories(\[\d+\]\.\w+)?"
     r"|findings\[rule=(GPU001|GPU002|KRN001|HOST001)/[^\]]*\](\.\S+)?|rules\[id=(GPU001|GPU002|KRN001|HOST001|MEM004)\]\.findings"
     r"|findings\[rule=HOST002/[^\]]*\]\.by_owner\.\w+|(reports\[\d+\]\.)?verdict\.\w+"
     r"|reports\[\d+\]\.iterations\.anatomy\.slowest_steps\[\d+\]\.(owner|cause))(:| ).*"),
    ("report JSON gains 'degraded' (#13.17)", r"^\.reports\[\d+\]\.degraded: added \[\]$"),
    ("SYNC001 counts calls (#13.19)", r"^\.findings\[\d+\]\.(title|message|syncs_followed_by_idle)(:| ).*@SYNC001$"),
    ("job facts from every environment encoding (#13.16)",
     r"^\.reports\[\d+\]\.(rank|local_rank|world_size|job_id|host|breakdown\.rank|breakdown\.devices\[\d+\]\.rank)"
     r"(:| ).*"),
    ("rank of findings and evidence from the new job facts (#13.16)",
     r"^\.findings\[\d+\]\.(rank|evidence\[\d+\]\.rank|evidence\[\d+\]\.detail\.straggler)(:| ).*"),
    ("exact per-iteration records: the breakdown's partition per iteration, phase; summed nccl_ns/memory_ns go (#11)",
     r"^\.reports\[\d+\]\.iterations\.anatomy\.(records|slowest_steps)\[\d+\]\.(phase|comm_exposed_ns|comm_overlapped_ns"
     r"|memory_only_ns|nccl_ns|memory_ns|compute_ns|gpu_busy_ns|idle_ns|cause)(:| ).*"),
    ("findings on a loop window gain their impact per step (#11)",
     r"^\.findings\[\d+\]\.(impact_per_step_ns|steps_in_window): added \d+ @\w+$"),
    ("GPU duty cycle from the exact per-iteration busy time (#11)",
     r"^\.reports\[\d+\]\.iterations\.anatomy\.gpu_duty_cycle_pct: .*"),
    # No corpus export carries NCCL message sizes: COMM003 is ok with no finding, or skipped saying what to collect.
    ("COMM003 collective bandwidth joins the rules (#14)",
     r'^\.rules\[id=COMM003\]: added \{"id": "COMM003", "status": "(ok", "reason": null, "findings": 0|skipped", '
     r'"reason": "no (NCCL message sizes|report has rows)).*'),
    ("gap rules show where the host CPU was in their gaps (HOST002's samples; #14)",
     r"^\.findings\[\d+\]\.host_functions: added .*@(GPU001|SYNC001|HOST001)$"),
    ("kernel dominance in the report summary (#14)",
     r"^\.reports\[\d+\]\.(dominant_kernel: added .*|top_kernels\[\d+\]\.share_pct: added .*)$"),
    # Six corpus exports list their host's NICs (TARGET_INFO_NIC_INFO); none has GPU or NIC metrics.
    ("the host's NIC inventory in the report summary (#14)",
     r'^\.reports\[\d+\]\.system_metrics: added \{"gpu": \[\], "nic": \[\], "nics": \[\{"nic_id": .*$'),
    ("results carry the version of their JSON contract", r"^\.schema_version: added \d+$"),
    ("one formatting module: durations in text with three significant digits, the unit chosen per value",
     r"^.*: durations reformatted( @\w+)?$"),
    ("the verdict leads the result, the run's and each nsys report's",
     r'^\.(verdict|reports\[\d+\]\.verdict): added \{"kind": "\w+", "text": .*'),
    ("KRN004 launch shape and KRN005 dominant kernel join the rules",
     r'^\.rules\[id=KRN00[45]\]: added \{"id": "KRN00[45]", "status": "(ok|skipped)".*'),
    ("KRN004 launch-shape findings (blocks < SMs, blocks under a warp)", r"^\.findings\[rule=KRN004/.*: added .*"),
    ("KRN005 dominant-kernel findings with their ncu command", r"^\.findings\[rule=KRN005/.*: added .*"),
    ("every loop of a report in iterations.loops (several loops), and the program's shape",
     r"^\.reports\[\d+\]\.iterations\.(loops|program): added .*"),
    ("phases that match the program: one-shot start-up / work / teardown, epilogue, teardown after the last GPU work",
     r"^\.reports\[\d+\]\.phases(\[\d+\]\.(name|start_ns|end_ns|reason))?(:| ).*"),
    ("a one-shot program's default window is its work phase",
     r"^\.reports\[\d+\]\.window\.(phase|reason|start_ns|end_ns)(:| ).*"),
    ("PHASE001 names a one-shot start-up; 'until the first iteration'",
     r"^\.findings\[\d+\]\.(title|message)(:| ).*@PHASE001$"),
    ("findings list the loops their evidence lies in (several loops)", r"^\.findings\[\d+\]\.loops: added .*"),
    # NCCL's network transfers (ncclNet* NVTX ranges): every nsys report says whether it records them.
    ("the report's NCCL network transfers (run as a whole)", r'^\.reports\[\d+\]\.network: added \{"has_ranges": .*$'),
    ("a run of one report with network ranges has its matrix (run as a whole)", r'^\.network: added \{"ranks": .*$'),
    ("COMM003 by kernel gains the network sends of NCCL's ranges (run as a whole)",
     r"^\.findings\[\d+\]\.(title|message|network)(:| ).*@COMM003$"),
    ("COMM005 late node joins the run-level rules (run as a whole)",
     r'^\.rules\[id=COMM005\]: added \{"id": "COMM005", "status": "(ok", "reason": null, "findings": 0|skipped").*'),
    ("idle anatomy of each report: what the host did while each device idled (#23.1)",
     r"^\.reports\[\d+\]\.idle_anatomy: added .*"),
    ("MEM006, HOST003, HOST004 join the rules (#23.2)",
     r"^\.(rules\[id=(MEM006|HOST003|HOST004)\]|findings\[rule=(MEM006|HOST003|HOST004)\]): added .*"),
    ("PHASE001 says what fills start-up from the idle anatomy (#23.3)",
     r"^\.findings\[(\d+|rule=PHASE001)\]\.(message|advice|idle_anatomy)(:| ).*@PHASE001$"),
    # Allocation in the loop, host communication and compilation instants now belong to MEM006/HOST003/HOST004:
    # the rules that owned the gaps around them keep the rest (and a gap left empty is no longer counted).
    ("gap owners keep the idle the host-activity rules claim (#23.2)",
     r"^\.findings\[(\d+|rule=\w+)\]\.(impact_ns|impact_pct|impact_per_step_ns|message|title|severity|idle_gaps"
     r"|evidence\[\d+\]\.value_ns|evidence_total|causes\.\w+\.(total_ns|gaps|count)|by_cause\.\w+|main_cause|owned_ns)(:| ).*"
     r"@(GPU001|GPU002|KRN001|SYNC001|MEM002|HOST001)$"),
    ("GPU002's regions ranked by the idle they keep after the claims (#23.2)",
     r"^\.findings\[(\d+|rule=GPU002)\]\.evidence\[\d+\]\.(start_ns|end_ns|nvtx|detail\.\w+)(:| ).*@GPU002$"),
    # SYNC001 and MEM002 own only the idle painted inside their calls (``sync``; ``sync_copy``, ``memset``); the
    # rest of the gaps they owned by precedence goes to GPU001 / KRN001 / GPU002, which changes their impacts,
    # evidence, findings that appear or go, the verdict, the slowest steps' owners and HOST002's idle by owner.
    ("SYNC001 and MEM002 own the idle inside their calls, the rest of each gap its structural owner",
     r"^\.(findings\[rule=(GPU001|GPU002|KRN001|SYNC001|MEM002|HOST001)/[^\]]*\](\.\S+)?"
     r"|rules\[id=(GPU001|GPU002|KRN001|SYNC001|MEM002|HOST001)\]\.findings|findings\[rule=HOST002/[^\]]*\]\.by_owner\.\w+"
     r"|(reports\[\d+\]\.)?verdict\.\w+|reports\[\d+\]\.iterations\.anatomy\.slowest_steps\[\d+\]\.(owner|cause))(:| ).*"),
]
# Exports whose analysis window moved (a one-shot program's work window, a loop split or no longer false):
# every figure judged on the window follows from it (kind "judged on the new window").
WINDOW_MOVED = r"^\.reports\[\d+\]\.(window\.(start_ns|end_ns|phase)|iterations\.(count|source))(:| ).*"
FOLLOWS_WINDOW = (r"^\.(findings|rules\[id=\w+\]\.(findings|status|reason)|steps|aligned_window|reports\[\d+\]\.(breakdown|launches|nvtx|"
                  r"iterations|top_kernels|dominant_kernel|kernels))")

_DURATION = re.compile(r"(-?[\d,]*\.?\d+) (s|ms|µs|ns)\b")
_NS = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}


def _reformatted(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with its durations written another way (same values within both roundings:
    the old ``%.3f ms`` and three significant digits)."""
    def parts(text: str) -> tuple[str, list[float]]:
        values = [float(m.group(1).replace(",", "")) * _NS[m.group(2)] for m in _DURATION.finditer(text)]
        return _DURATION.sub("<D>", text), values

    (ska, va), (skb, vb) = parts(a), parts(b)
    return a != b and ska == skb and len(va) == len(vb) and all(
        abs(x - y) <= max(500.0, 0.006 * abs(y)) for x, y in zip(va, vb, strict=True))


def diff(a, b, path: str = "", out: list[str] | None = None) -> list[str]:
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: added {json.dumps(b[k])[:120]}")
            elif k not in b:
                out.append(f"{path}.{k}: removed")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and (keys := _keyed_lists(a, b, path)) is not None:
        # Lists of things with ids (the rule statuses) matched by id, and findings matched by rule (one per
        # rule, report and phase here): a new rule, or a finding that moves in the ranking, is one difference
        # and not a shifted list.
        label, ka, kb = keys
        for k in list(ka) + [k for k in kb if k not in ka]:
            if k not in kb:
                out.append(f"{path}[{label}={k}]: removed")
            elif k not in ka:
                out.append(f"{path}[{label}={k}]: added {json.dumps(kb[k])[:120]}")
            else:
                diff(ka[k], kb[k], f"{path}[{label}={k}]", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{path}[{i}]", out)
    elif isinstance(a, str) and isinstance(b, str) and _reformatted(a, b):
        out.append(f"{path}: durations reformatted")
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}")
    return out


def _keyed(items: list, field: str, key) -> dict | None:
    """The items keyed by ``key(item)`` when every item is a dict with ``field`` and the keys are distinct."""
    if not items or not all(isinstance(x, dict) and field in x for x in items):
        return None
    keyed = {key(x): x for x in items}
    return keyed if len(keyed) == len(items) else None


def _keyed_lists(a: list, b: list, path: str) -> tuple[str, dict, dict] | None:
    """Both lists keyed the same way (by 'id', or findings by 'RULE/report/phase'), or None."""
    ways = [("id", "id", lambda x: str(x["id"]))]
    if path == ".findings":
        ways.append(("rule", "rule_id", lambda x: f"{x['rule_id']}/{x.get('report')}/{x.get('phase')}"))
    for label, field, key in ways:
        ka, kb = _keyed(a, field, key), _keyed(b, field, key)
        if ka is not None and kb is not None:
            return label, ka, kb
    return None


def kind_of(line: str, before: dict) -> str | None:
    m = re.match(r"^\.findings\[(\d+)\]", line)
    keyed = re.match(r"^\.findings\[rule=(\w+)[/\]]", line)
    tagged = line + (f" @{before['findings'][int(m.group(1))]['rule_id']}" if m else
                     f" @{keyed.group(1)}" if keyed else "")
    for kind, pattern in EXPECTED:
        if re.match(pattern, tagged, re.S):
            return kind
    return None


def main(argv: list[str]) -> int:
    snaps = Path(argv[0])
    names = argv[1:] or sorted(p.name for p in (ROOT / CORPUS).glob("*.sqlite"))
    kinds: Counter[str] = Counter()
    unexpected = 0
    for name in names:
        r = subprocess.run([str(ROOT / ".venv/bin/goodput"), "analyze", "--quiet", "--format", "json",
                            str(CORPUS / name)], capture_output=True, text=True, cwd=ROOT)
        before = json.loads((snaps / f"{name}.json").read_text())
        if r.returncode != 0:
            print(f"{name}: UNEXPECTED exit {r.returncode}: {r.stderr.strip()[-200:]}")
            unexpected += 1
            continue
        lines = diff(before, json.loads(r.stdout))
        found = Counter()
        moved = any(re.match(WINDOW_MOVED, line) for line in lines)
        for line in lines:
            kind = kind_of(line, before)
            if kind is None and moved and re.match(FOLLOWS_WINDOW, line):
                kind = "judged on the new window (one-shot work, loops split or no longer false)"
            if kind is None:
                print(f"{name}: UNEXPECTED {line}")
                unexpected += 1
            else:
                found[kind] += 1
        kinds.update(found)
        print(f"{name}: " + ("identical" if not lines else "; ".join(f"{k}: {n}" for k, n in found.items())))
    print(f"\n{len(names)} exports; differences by kind: " + (", ".join(f"{k}: {n}" for k, n in kinds.items())
                                                             or "none") + f"; unexpected: {unexpected}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
