"""`goodput analyze` on ncu CSVs prints each profiled kernel's memory story, names escaped, and the JSON carries it."""

from __future__ import annotations

import json

from tests.analysis.ncu_builders import long_csv, write
from tests.cli.test_cli_ingest_analyze import goodput
from tests.conftest import corpus_file


def test_text_shows_levels_bound_and_roofline(tmp_path):
    proc = goodput("analyze", str(corpus_file("numba-copy-blocked-full.csv")), str(corpus_file("pytorch-sgemm-small.csv")))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "memory story (1 profiled kernels)" in out and "memory story (2 profiled kernels)" in out
    assert "DRAM 4.14 GB 196 GB/s 62 % of peak" in out                      # numba copy: 196,456,177,859.63 B/s
    assert "bound: bandwidth (dram): DRAM at 61.8 % of its peak" in out
    assert "roofline: 19.4 GFLOP/s fp32" in out and "of the L2 roof" in out  # sgemm: 145,408 FLOP in 7,488 ns


def test_json_has_kernels_and_text_escapes_control_characters(tmp_path):
    data = long_csv([("GPU Speed Of Light Throughput", "Duration", "usecond", "10"),
                     ("GPU Speed Of Light Throughput", "DRAM Throughput", "%", "20")],
                    kernels=[{"Kernel Name": "evil\x1b[31m<script>(int)"}])
    src = write(tmp_path, data)
    proc = goodput("analyze", str(src))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "evil\\x1b[31m<script>" in proc.stdout
    proc = goodput("analyze", "--format", "json", str(src))
    kernels = json.loads(proc.stdout)["reports"][0]["kernels"]
    assert kernels[0]["name"].startswith("evil\x1b[31m<script>")
    assert kernels[0]["memory"]["levels"][0]["pct_of_peak"] == 20.0


def test_ncu_only_headline_saving_causes_and_unknowns():
    proc = goodput("analyze", str(corpus_file("numba-copy-blocked-full.csv")), str(corpus_file("conv2d-shared-memory.csv")),
                   str(corpus_file("pytorch-sgemm-small.csv")))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # numba: one launch of 21,058,944 ns (gpu__time_duration); its findings share that time.
    assert "profiled kernel time 21.1 ms over 1 kernels profiled; estimated saving" in out
    assert "could save" in out and "NCU001 Uncoalesced global accesses" in out and "(cause)" in out
    # conv2d-shared-memory has neither a duration nor cycles: unknown, never 0.0 us.
    assert "profiled kernel time unknown over 1 kernels profiled (1 of unknown duration)" in out
    assert "#0 implicit_convolve_sgemm (unknown)" in out and "(0 ns)" not in out
    # sgemm: ampere_ names GA100 or GA10x and the CSV has no SM count: no compute roof, said so.
    assert "compute roof unknown: kernel name ampere_: compute capability 8.0 or 8.6" in out


def test_text_leads_with_the_ncu_verdict_and_shows_limiter_and_speed_of_light():
    """Two ncu CSVs: the run's verdict is the costlier kernel's (the uncoalesced copy), the other report keeps its
    own verdict under its header; every kernel shows its limiter and speed-of-light bound."""
    proc = goodput("analyze", str(corpus_file("numba-copy-blocked-full.csv")), str(corpus_file("pytorch-sgemm-small.csv")))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Verdict: copy_blocked (1 launch, 21.1 ms profiled) is memory-bound")
    assert sum(line.startswith("   ncu verdict: ampere_sgemm_32x32_sliced1x4_tn") for line in lines) == 1
    assert not any(line.startswith("   ncu verdict: copy_blocked") for line in lines)  # already the run's
    assert "limiter: memory (dram): DRAM at 61.8 % of its peak" in proc.stdout
    assert "limiter: launch (tiny launch)" in proc.stdout
    assert "speed of light 13.0 ms (memory dram" in proc.stdout  # 61.84% x 21,058.9 us
