"""Goodput's verdict against the independent expert labels (corpus/labels/labels.json) of every corpus nsys export.

A reviewed table maps each label's ``verdict.first`` (its opening words are quoted, and checked against the file,
so a changed label fails here) to the verdict kinds that say the same thing, and its ``wrong_to_say_first`` to
kinds. For each export: the verdict's kind is one the label calls for; the verdict's finding (``rule_id``: the
finding the verdict leads with, the top of what a reader sees) stands for that same kind and is none the label
calls wrong to say first; a verdict about the report as a whole (start-up, teardown, no GPU data) may have none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from analysis.api import analyze
from analysis.diagnosis.verdict import KINDS, finding_kind
from analysis.run.facts import finding_from_json
from tests.analysis.planting import corpus_rows as _raw
from tests.analysis.planting import ingested
from tests.conftest import NSYS_FILES, corpus_dir, corpus_file

ANYTHING_BUT_NO_DATA = frozenset(KINDS) - {"no_gpu_data"}
AS_A_WHOLE = {"no_gpu_data", "startup", "teardown", "host_paced", "gpu_bound_kernel"}


@dataclass(frozen=True)
class Label:
    short: str          # the export, by its name after the last "__"
    words: str          # how the label's verdict.first opens
    kinds: frozenset    # verdict kinds that say what the label says
    wrong: frozenset    # kinds of what the label lists under wrong_to_say_first


def L(short: str, words: str, kinds: set[str], wrong: set[str] | frozenset) -> Label:
    return Label(short, words, frozenset(kinds), frozenset(wrong))


TABLE = [
    L("a30-mig.sqlite", "Single-block launch", {"launch_shape"},
      {"gpu_bound_kernel", "copies"}),  # "GPU-bound at 99.6%, nothing to fix"; "Memcpy-bound"
    L("cloverleaf-devsync.sqlite", "GPU-bound timestep loop", {"gpu_bound_kernel"},
      {"sync_bound", "copies"}),  # "Sync-heavy"; "Pageable memcpy is the problem"
    L("clue-um-t4.sqlite", "Host-bound run", {"host_bound"},
      {"uvm", "launch_bound"}),  # "UVM page-fault bound"; "GPU idle => launch overhead"
    L("cudf-groupby-2020.sqlite", "Start-up: the first CUDA call", {"startup"},
      {"sync_bound", "launch_bound"}),  # "cudaMemsetAsync is slow"; "GPU idle 97.9% => launch-bound"
    L("cupy-a100.sqlite", "Start-up only", {"startup"},
      {"host_bound", "allocation"}),  # "starved GPU"; "use a memory pool, cudaMalloc is slow"
    L("cupy-power-iteration.sqlite", "Host text I/O serialised with the GPU", {"host_bound"},
      {"copies", "launch_bound"}),  # "Pageable DtoH memcpy costs 1 s"; "Launch-bound"
    L("devsync-heavy-report13.sqlite", "Launch/sync-bound loop of tiny kernels", {"launch_bound", "sync_bound"},
      {"gpu_bound_kernel", "uvm"}),  # "optimize find_most_negative"; "UVM migrations"
    L("gaussian-threadsync.sqlite", "GPU-bound elimination loop", {"gpu_bound_kernel"},
      {"launch_bound", "host_bound", "sync_bound"}),  # "GPU-idle / launch-bound"; "cudaThreadSynchronize is the cost"
    L("nccl-ring-2node-r0-ault43.sqlite", "One-shot NCCL test dominated by communicator setup", {"startup"},
      {"host_bound", "launch_bound", "communication"}),  # "starved/launch-bound"; "Network/collective-bound"
    L("nccl-ring-2node-r1-ault44.sqlite", "One-shot NCCL test dominated by communicator setup", {"startup"},
      {"host_bound", "launch_bound", "communication"}),
    L("nometa-nocuda-trace.sqlite", "No diagnosis possible", {"no_gpu_data"}, ANYTHING_BUT_NO_DATA),
    # SYNC001 owns only the idle inside cuStreamSynchronize (8.1 ms); the launches' idle stays KRN001's.
    L("openacc-report12-nometa.sqlite", "API-overhead-bound loop around a 2.3 us kernel", {"launch_bound", "allocation"},
      {"gpu_bound_kernel"}),  # "Kernel is slow / GPU-bound"
    L("openacc-v100.sqlite", "Serial GPU kernels", {"launch_shape"},
      {"gpu_bound_kernel", "sync_bound"}),  # "profile with ncu for micro-optimisations"; "Sync-bound"
    L("openmp-offload-t4.sqlite", "Host<->device data movement every time step", {"copies"},
      {"gpu_bound_kernel"}),  # "GPU-bound at 99.8% busy: optimize the kernel"
    L("poolformer-nvtx-only.sqlite", "No CUDA trace (NVTX only)", {"no_gpu_data"}, ANYTHING_BUT_NO_DATA),
    L("pytorch-dlprof-relu.sqlite", "Start-up dominated micro-benchmark", {"startup"},
      {"host_bound", "launch_bound", "allocation"}),  # "GPU starved / launch-bound"; "use a caching allocator"
    # HOST004 owns 842 ms under compileFusion/NVRTC; GPU001 keeps 2.31 s of gaps in which nothing of the host's
    # was recorded (no CPU samples, no OS runtime trace): an absence of evidence, so the recorded cause leads
    # (``verdict.NAMED_SHARE``) and the sentence gives the unrecorded idle with the flags that would show it.
    L("pytorch-nvfuser-h200.sqlite", "Not a GPU workload", {"jit"},
      {"launch_bound", "host_bound"}),  # "GPU idle 99.6% => launch-bound / starved GPU"
    L("runtime-only-no-kernel-table.sqlite", "GPU activity was not recorded", {"no_gpu_data"},
      {"sync_bound", "host_bound"}),  # "too many synchronisations"; "GPU idle"
    # MEM002 owns only the 1.1 ms inside cudaMemcpy; the idle in sampled CPU loops is GPU001's, the MPI HOST003's.
    L("saxpy-mpi-rank0-perlmutter.sqlite", "Host-bound iteration", {"host_bound"},
      {"copies", "communication"}),  # "Memcpy-bound"; "MPI-bound"
    L("stdpar-um-gpu.sqlite", "Not GPU-bound", {"host_bound"},
      {"launch_bound", "gpu_bound_kernel"}),  # "GPU idle => launch overhead"; "optimize DeviceReduceKernel"
    L("tensorrt-3090.sqlite", "No steady state in this capture", {"teardown"},
      {"host_bound", "gpu_bound_kernel"}),  # "GPU idle 98.8%"; "Kernel X is the hotspot"
    L("torchrun-2gpu-nccl-sendrecv-before-cropped.sqlite", "GPU-bound in the 300 ms cropped window", {"gpu_bound_kernel"},
      {"sync_bound", "communication", "host_bound", "launch_bound"}),
    # MEM004 owns the idle between the 1,536 DtoH migrations (nothing else recorded on the host) and names
    # the 19,766 HtoD migrations that overlap the kernel (test_mem004_equals_sql_on_the_raw_export).
    L("unified-memory-a100.sqlite", "UVM demand paging", {"uvm"},
      {"launch_bound", "gpu_bound_kernel"}),  # "GPU idle 89.2% => launch-bound"; "add is compute-inefficient"
    # Argued below (test_vecadd_start_up_is_the_pinned_allocation): the label's "one-shot program dominated by
    # pinned host allocation" is a start-up verdict whose sentence names cudaHostAlloc; both kinds say it.
    L("vecadd-2026.sqlite", "One-shot program dominated by pinned host allocation", {"startup", "allocation"},
      {"host_bound", "launch_bound", "gpu_bound_kernel"}),  # "GPU idle 92.9% / launch-bound"; "optimize add_parallel"
]


def _labels() -> dict[str, dict]:
    data = json.loads((corpus_dir() / "labels" / "labels.json").read_text())["nsys"]
    return {name.split("__")[-1]: value for name, value in data.items()}


def test_the_table_covers_every_corpus_export_once() -> None:
    assert sorted(row.short for row in TABLE) == sorted(p.name.split("__")[-1] for p in NSYS_FILES)
    assert all(row.kinds <= set(KINDS) and row.wrong <= set(KINDS) and not row.kinds & row.wrong for row in TABLE)


@pytest.mark.parametrize("row", [pytest.param(r, id=r.short) for r in TABLE])
def test_verdict_agrees_with_the_label(row: Label) -> None:
    label = _labels()[row.short]["verdict"]
    assert label["first"].startswith(row.words), "the label changed: review this row"
    result = analyze([ingested(corpus_file(row.short))]).to_json()
    verdict = result["verdict"]
    assert verdict["kind"] in row.kinds, verdict
    assert verdict["text"] and verdict["next_step"]
    if verdict["rule_id"] is None:
        assert verdict["kind"] in AS_A_WHOLE, verdict
        return
    top = next(f for f in result["findings"] if f["rule_id"] == verdict["rule_id"])
    # The verdict's finding stands for the same kind (PHASE001 speaks for start-up), never for a wrong one.
    kind = finding_kind(finding_from_json(top))
    assert kind == verdict["kind"], (top["rule_id"], verdict)
    assert kind not in row.wrong


def test_vecadd_start_up_is_the_pinned_allocation() -> None:
    """The label's allocation is start-up: all 814.7 ms of cudaHostAlloc end before the first GPU operation, which
    starts 80% into the trace; the start-up verdict names cudaHostAlloc first and costs the whole start-up."""
    first_gpu = _raw("vecadd-2026.sqlite", """SELECT MIN(start) FROM (SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL
                                               UNION ALL SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY)""")[0][0]
    ((calls, total, last_end),) = _raw("vecadd-2026.sqlite", """
        SELECT COUNT(*), SUM(r."end" - r.start), MAX(r."end") FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaHostAlloc%'""")
    assert (calls, total) == (3, 814_733_249) and last_end < first_gpu
    verdict = analyze([ingested(corpus_file("vecadd-2026.sqlite"))]).to_json()["verdict"]
    assert verdict["kind"] == "startup" and "mostly cudaHostAlloc 815 ms" in verdict["text"]
