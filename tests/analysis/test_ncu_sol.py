"""The speed-of-light bound, the limiter and the verdict of ncu reports: every corpus CSV against its expert label,
no saving above physics on any of them, and planted variants of real rows (a sub-wave grid with occupancy to
raise, the tensor pipe zeroed, DRAM bytes doubled) with the limiter and bound they must give."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.api import analyze
from analysis.readers.ncu.ingest import ingest_ncu
from tests.analysis.ncu_builders import raw_csv, read_corpus_csv, write
from tests.analysis.test_ncu_shared_gains import CORPUS, run_csv
from tests.conftest import corpus_file

NUMBA, CONV, SHARED, DROPOUT, SGEMM = CORPUS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("ncu-sol")
    return {name: run_csv(tmp, corpus_file(name)) for name in CORPUS}


def ncu_findings(result: dict) -> list[dict]:
    return [f for f in result["findings"] if f["rule_id"].startswith("NCU")]


def kernels(result: dict) -> list[dict]:
    return result["reports"][0]["kernels"]


# Every corpus CSV against its label: the limiter and the first thing to say ---------------------------------

def test_numba_copy_blocked_is_dram_bound_by_wasted_sectors(corpus):
    """Label: uncoalesced 'blocked' indexing first; DRAM 61.8% busy moving mostly unused bytes; not occupancy."""
    r = corpus[NUMBA]
    lim = kernels(r)[0]["memory"]["limiter"]
    assert (lim["kind"], lim["name"]) == ("memory", "dram")
    assert ncu_findings(r)[0]["rule_id"] == "NCU001"
    v = r["verdict"]
    assert v["kind"] == "ncu_memory" and v["rule_id"] == "NCU001" and "Uncoalesced" in v["text"]
    assert r["reports"][0]["verdict"] == v  # the report keeps its own; the run's is the same sentence
    assert not [f for f in ncu_findings(r) if f["rule_id"] == "NCU003"]  # occupancy 96%: never the story


def test_numba_uncoalesced_saving_is_bounded_by_the_coalesced_traffic(corpus):
    """Coalesced, the copy moves a quarter of the bytes: its bound is 25% of the DRAM time, so ncu's 74.14% fits
    (the bound at the same traffic, 61.8% of the duration, would not: the fix removes work)."""
    f = ncu_findings(corpus[NUMBA])[0]
    d = f["evidence"][0]["detail"]
    duration = 21_058_944
    assert d["sol_binding"]["name"] == "dram"
    assert d["sol_bound_ns"] == pytest.approx(0.25 * 0.6184 * duration, rel=1e-3)
    assert f["impact_ns"] == int(0.7414 * duration) <= duration - d["sol_bound_ns"]
    sol = kernels(corpus[NUMBA])[0]["memory"]["sol"]
    assert sol["bound_ns"] == pytest.approx(0.6184 * duration, rel=1e-3)  # at the same work


def test_conv2d_sub_wave_grid_is_a_launch_problem(corpus):
    """Label: 64 blocks x 64 threads, 0.05 waves: batch more per launch; 'raise occupancy' is wrong first."""
    r = corpus[CONV]
    lim = kernels(r)[0]["memory"]["limiter"]
    assert lim["kind"] == "launch" and "0.05" in lim["reason"] and lim["library"] == "cuDNN"
    assert ncu_findings(r)[0]["title"].startswith("Grid too small")
    assert not [f for f in ncu_findings(r) if f["rule_id"] in ("NCU003", "NCU004")]
    assert r["verdict"]["kind"] == "ncu_launch" and "batch" in r["verdict"]["next_step"]


def test_conv2d_shared_memory_says_shared_memory_is_clean(corpus):
    """Label: 0 bank conflicts, shared pipe at 1% of peak: look elsewhere; nothing else was collected."""
    r = corpus[SHARED]
    assert ncu_findings(r) == []
    v = r["verdict"]
    assert v["kind"] == "ncu_unknown" and "0 bank conflicts over 8,640 wavefronts" in v["text"]
    assert "1.0 % of peak" in v["text"] and "--section SpeedOfLight" in v["next_step"]
    assert v["impact_ns"] is None  # no finding, no cost claimed


def test_dropout_sweep_is_memory_bound_near_peak_and_small_sizes_are_launch_bound(corpus):
    """Label: the large instances run at ~75% of DRAM peak (near the roofline: nothing to fix in the kernel); the
    52 instances under 7 us are latency-bound at a ~5-6 us floor (fuse or batch)."""
    ks = kernels(corpus[DROPOUT])
    large = [k for k in ks if k["duration_ns"] >= 200_000]
    small = [k for k in ks if k["duration_ns"] < 7_000]
    assert len(large) == 7 and len(small) == 52
    assert all(k["memory"]["limiter"]["kind"] == "memory" for k in large)
    assert all(k["memory"]["limiter"]["kind"] == "launch" for k in small)
    # Near peak: reaching 85% of the binding unit's peak gains under 2% on every large launch.
    assert all(k["memory"]["sol"]["realistic_saving_ns"] < 0.02 * k["duration_ns"] for k in large)
    v = corpus[DROPOUT]["verdict"]
    assert v["kind"] == "ncu_memory" and "162 launches" in v["text"]


def test_sgemm_small_is_too_small_for_the_gpu_and_advice_is_about_the_call(corpus):
    """Label: problem far too small (SM 0.25%): batch the small GEMMs; neither memory- nor compute-bound."""
    r = corpus[SGEMM]
    assert [k["memory"]["limiter"]["kind"] for k in kernels(r)] == ["launch", "launch"]
    assert [k["memory"]["limiter"]["library"] for k in kernels(r)] == ["cuBLAS", "cuBLAS"]
    v = r["verdict"]
    assert v["kind"] == "ncu_launch" and "ampere_sgemm" in v["text"] and "cuBLAS" in v["next_step"]


# No saving above physics, on every corpus CSV ----------------------------------------------------------------

@pytest.mark.parametrize("name", CORPUS)
def test_no_saving_exceeds_duration_or_speed_of_light(corpus, name):
    r = corpus[name]
    by_id = {k["kernel_id"]: k for k in kernels(r)}
    for k in by_id.values():
        sol = k["memory"]["sol"]
        if k["estimated_saving_ns"] is not None:
            assert k["duration_ns"] is not None and k["estimated_saving_ns"] <= k["duration_ns"]
            if sol["bound_ns"] is not None and not any(c["rule_id"] in ("NCU001", "NCU004") for c in k["causes"]):
                assert k["estimated_saving_ns"] <= k["duration_ns"] - sol["bound_ns"] + 1
    for f in ncu_findings(r):
        assert f["impact_ns"] <= f["kernel_time_ns"]
        d = f["evidence"][0]["detail"]
        for kid, ns in f["launch_savings"]:
            k = by_id[kid]
            assert ns <= k["duration_ns"]
            # A rule that removes work (NCU001, NCU004) is bounded by the work left; the others by the launch's.
            bound = d["sol_bound_ns"] if f["rule_id"] in ("NCU001", "NCU004") and kid == d["kernel_ids"][0] \
                else k["memory"]["sol"]["bound_ns"]
            if bound is not None:
                assert ns <= k["duration_ns"] - bound + 1
    # A group's saving is never shown under one launch: the launches' own savings add up to at most the group's.
    group = sum(f["impact_ns"] for f in ncu_findings(r))
    assert sum(k["estimated_saving_ns"] or 0 for k in by_id.values()) <= group + len(by_id)


# Planted variants of real rows ------------------------------------------------------------------------------

def real_metrics(name: str, kernel_id: str = "0") -> tuple[dict[str, str], dict[str, str]]:
    """(units, values) of one real row's raw-named metrics (names with ``__``), as a ``--page raw`` needs them."""
    csv = read_corpus_csv(corpus_file(name))
    units, values = {}, {}
    for row in csv.rows:
        if row["ID"] == kernel_id and "__" in row["Metric Name"]:
            units[row["Metric Name"]] = row["Metric Unit"]
            values[row["Metric Name"]] = row["Metric Value"]
    return units, values


def planted(tmp_path: Path, name: str, changes: dict[str, tuple[str, str]], drop: tuple[str, ...] = (),
            ident: dict[str, str] | None = None, kernel_id: str = "0") -> dict:
    units, values = real_metrics(name, kernel_id)
    for metric in drop:
        assert metric in units, metric  # the real row had it
        units.pop(metric), values.pop(metric)
    for metric, (unit, value) in changes.items():
        units[metric], values[metric] = unit, value
    real = next(row for row in read_corpus_csv(corpus_file(name)).rows if row["ID"] == kernel_id)
    row = {"ID": "0", "Kernel Name": real["Kernel Name"], **(ident or {}), **values}
    out = tmp_path / "planted.duckdb"
    ingest_ncu(write(tmp_path, raw_csv([row], units)), out)
    return analyze([out], labels=["planted.csv"]).to_json()


LONG = {"sm__cycles_elapsed.avg": ("cycle", "638,724")}  # the conv2d row 100x longer (666 us): not a tiny launch


def test_planted_occupancy_raised_on_a_sub_wave_grid_saves_nothing(tmp_path):
    """The conv2d row, 100x longer, with a large occupancy gap planted on its 0.05-wave grid: the limiter is the
    launch, occupancy is silent, and the small grid's saving stays under duration - speed of light."""
    r = planted(tmp_path, CONV, {**LONG, "launch__waves_per_multiprocessor": ("", "0.05"),
                                 "sm__maximum_warps_per_active_cycle_pct": ("%", "100"),
                                 "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "3.08")})
    k = kernels(r)[0]
    assert k["memory"]["limiter"]["kind"] == "launch"
    assert not [f for f in ncu_findings(r) if f["rule_id"] == "NCU003"]
    lead = ncu_findings(r)[0]
    assert lead["title"].startswith("Grid too small")
    assert lead["impact_ns"] <= k["duration_ns"] - k["memory"]["sol"]["bound_ns"] + 1
    # The same grid planted to fill 3 waves: now the occupancy gap is where warps limit, and it is reported.
    (tmp_path / "full").mkdir()
    r = planted(tmp_path / "full", CONV, {**LONG, "launch__waves_per_multiprocessor": ("", "3"),
                                          "sm__maximum_warps_per_active_cycle_pct": ("%", "100"),
                                          "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "3.08")})
    assert kernels(r)[0]["memory"]["limiter"]["kind"] != "launch"
    assert [f for f in ncu_findings(r) if f["rule_id"] == "NCU003"]


@pytest.mark.parametrize(("cc", "family"), [("8.0", "mma.sync"), ("9.0", "wgmma"), ("10.0", "tcgen05")])
def test_planted_tensor_pipe_zeroed_on_an_fma_bound_kernel(tmp_path, cc, family):
    """The conv2d row with its FMA pipe planted at 85% of peak and the tensor pipe zeroed: the tensor cores are
    unused, said with the instruction family of the compute capability; the bound is 85% of the duration."""
    r = planted(tmp_path, CONV, {**LONG, "launch__waves_per_multiprocessor": ("", "4"),
                                 "sm__inst_executed_pipe_tensor.sum": ("inst", "0"),
                                 "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed": ("%", "85"),
                                 "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "80")}, ident={"CC": cc})
    k = kernels(r)[0]
    lim = k["memory"]["limiter"]
    assert (lim["kind"], lim["name"]) == ("pipe", "fma") and lim["tensor_cores"]["used"] is False
    assert family in lim["tensor_cores"]["family"] and "tensor cores are unused" in lim["reason"]
    assert k["memory"]["sol"]["bound_ns"] == pytest.approx(0.85 * k["duration_ns"], rel=1e-6)
    v = r["verdict"]
    assert v["kind"] == "ncu_tensor_unused" and family in v["text"] and "tensor cores" in v["next_step"]
    # The real row (640 tensor instructions) keeps its tensor pipe in use: no such verdict.
    (tmp_path / "used").mkdir()
    r = planted(tmp_path / "used", CONV, {**LONG, "launch__waves_per_multiprocessor": ("", "4"),
                                          "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed": ("%", "85")},
                ident={"CC": cc})
    assert kernels(r)[0]["memory"]["limiter"]["tensor_cores"]["used"] is True and r["verdict"]["kind"] == "ncu_compute"


A100_80GB = {"device__attribute_max_mem_frequency_khz": ("", "1,593,000"),
             "device__attribute_global_memory_bus_width": ("", "5,120")}  # 2 x 1.593 GHz x 5120 bit / 8 = 2.039 TB/s
DRAM_PCT = ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "gpu__compute_memory_throughput.avg"
            ".pct_of_peak_sustained_elapsed")


@pytest.mark.parametrize("factor", [1.0, 1.3, 2.0])
def test_planted_dram_bytes_scaled_on_the_largest_dropout_launch(tmp_path, factor):
    """The dropout sweep's largest launch (#39, 448.32 us, 684,936,704 DRAM bytes) with the device's DRAM peak
    from its attributes (A100 80GB) and its DRAM bytes scaled: the DRAM term is bytes / 2.039 TB/s; at 1x L2
    (84.22% x duration) binds, at 1.3x DRAM does, and at 2x the bytes could not move in the kernel's time, so
    the bound is the whole duration and nothing can be saved."""
    dram = 684_936_704 * factor
    r = planted(tmp_path, DROPOUT, {**A100_80GB, "dram__bytes.sum": ("byte", f"{dram:.0f}")}, drop=DRAM_PCT,
                ident={"CC": "8.0"}, kernel_id="39")
    k = kernels(r)[0]
    sol = k["memory"]["sol"]
    peak = 2 * 1_593_000e3 * 5120 / 8
    dram_term = next(t for t in sol["terms"] if t["name"] == "dram")
    assert dram_term["ns"] == pytest.approx(dram / peak * 1e9, rel=1e-9) and "(device)" in dram_term["basis"]
    duration = 448_320
    expected = min(duration, max(dram / peak * 1e9, 0.8422 * duration))
    assert sol["bound_ns"] == pytest.approx(expected, rel=1e-6)
    assert sol["binding"]["name"] == ("l2" if factor == 1.0 else "dram")
    assert k["memory"]["limiter"]["kind"] == "memory"
    for f in ncu_findings(r):
        assert f["impact_ns"] <= duration - expected + 1
    if factor == 2.0:
        assert sol["max_saving_ns"] == 0 and all(f["impact_ns"] == 0 for f in ncu_findings(r))


@pytest.mark.parametrize(("cc", "legacy"), [("10.0", True), ("9.0", True), ("8.0", False)])
def test_planted_tensor_bound_on_the_older_mma_sync_path(tmp_path, cc, legacy):
    """The conv2d row planted as a tensor-bound kernel on HMMA (mma.sync) at 70% of peak: on Hopper and Blackwell,
    whose native wgmma/tcgen05 run the same math faster, it is compute-bound on the wrong instructions; on
    Ampere mma.sync is the native path."""
    r = planted(tmp_path, CONV, {**LONG, "launch__waves_per_multiprocessor": ("", "4"),
                                 "sm__inst_executed_pipe_tensor_op_hmma.sum": ("inst", "100,000"),
                                 "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": ("%", "70")},
                ident={"CC": cc})
    lim = kernels(r)[0]["memory"]["limiter"]
    assert (lim["kind"], lim["name"]) == ("pipe", "tensor_op_hmma") and lim["tensor_cores"]["used"] is True
    assert ("wrong instructions" in lim["reason"]) is legacy
    assert (lim["tensor_cores"]["legacy_path"] == "mma.sync (HMMA)") is legacy
