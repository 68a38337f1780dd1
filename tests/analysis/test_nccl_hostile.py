"""Hostile NCCL logs get a clear error or a bounded result, quickly: binary bytes, 10 MB lines, a million
warnings, huge numbers, markup in strings; and the small pieces of the grammar on their own."""

from __future__ import annotations

import json
import os
import time

import pytest

from analysis.errors import TraceError
from analysis.readers.nccl import ingest, load, looks_like_nccl_log, normalize_version, parse_file
from analysis.readers.nccl.lines import MAX_LINE_BYTES, peel_label, strip_mpirun
from analysis.readers.nccl.parse import MAX_CONNECTIONS, MAX_WARNINGS_PER_KIND, parse_transport
from tests.conftest import corpus_dir

GDR_ON = next((corpus_dir() / "nccl").glob("*2x1-a100pcie-ib-gdr-on-allreduce-2.16.log"))
HEAD = GDR_ON.read_bytes()[:4000].rsplit(b"\n", 1)[0] + b"\n"


def cpu_and(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def test_sniffing():
    assert looks_like_nccl_log(b"host:1:2 [0] NCCL INFO Bootstrap : Using eth0\n")
    assert looks_like_nccl_log(b" 3: nid1:4:5 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n")
    assert looks_like_nccl_log(b"[1,0]<stdout>:h:1:1 [0] NCCL INFO x\n")
    assert looks_like_nccl_log(b"# nThread 1 nGpus 1 minBytes 8\n")
    assert not looks_like_nccl_log(b"SQLite format 3\x00" + b"NCCL INFO" * 10)
    assert not looks_like_nccl_log(b"ID,Kernel Name,Metric Name\n1,k,m\n")
    assert not looks_like_nccl_log(os.urandom(4096) + b"NCCL INFO")
    assert not looks_like_nccl_log(b"")


def test_binary_bytes_are_refused_quickly(tmp_path):
    src = tmp_path / "bin.log"
    src.write_bytes(os.urandom(2 * 2**20))
    out = tmp_path / "o.duckdb"
    with pytest.raises(TraceError) as err:
        ingest(src, out)
    assert err.value.code == "not_nccl_log"
    assert not out.exists() and not list(tmp_path.glob(".o.duckdb*"))


def test_empty_text_and_too_large(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(TraceError) as err:
        parse_file(empty)
    assert err.value.code == "empty_file"
    prose = tmp_path / "prose.log"
    prose.write_text("hello\n" * 1000)
    with pytest.raises(TraceError) as err:
        parse_file(prose)
    assert err.value.code == "not_nccl_log"
    with pytest.raises(TraceError) as err:
        parse_file(GDR_ON, max_bytes=1000)
    assert err.value.code == "too_large" and "limit" in err.value.message


def test_binary_after_a_valid_head_is_a_bounded_result(tmp_path):
    src = tmp_path / "mixed.log"
    src.write_bytes(HEAD + os.urandom(8 * 2**20) + b"\n" + GDR_ON.read_bytes())
    parsed, cpu = cpu_and(lambda: parse_file(src))
    assert cpu < 30
    assert parsed.version_raw is not None and parsed.tests.rows  # the real log after the noise still reads


@pytest.mark.parametrize("newline_at_end", [True, False])
def test_a_10_mb_line_is_cut_and_counted(tmp_path, newline_at_end):
    src = tmp_path / "long.log"
    long_line = b"h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via " + b"P2P/" * (10 * 2**20 // 4)
    src.write_bytes(HEAD + long_line + (b"\n" if newline_at_end else b"") + (GDR_ON.read_bytes() if newline_at_end
                                                                              else b""))
    parsed, cpu = cpu_and(lambda: parse_file(src))
    assert cpu < 30
    assert parsed.counters["truncated"] == 1
    cut = [c for c in parsed.connections.values() if c["src"] == 0 and c["dst"] == 1 and c["kind"] == "P2P"]
    assert cut and all(len(c["text"]) <= 512 for c in cut)
    if newline_at_end:
        assert parsed.tests.avg_busbw == pytest.approx(11.4804)  # the lines after the long one still read


def test_a_million_warnings_are_counted_not_kept(tmp_path):
    src = tmp_path / "warn.log"
    line = b"n1:10:11 [0] misc/ibvwrap.cc:1 NCCL WARN Call to ibv_create_cq failed <script>x</script>\n"
    with src.open("wb") as fh:
        fh.write(HEAD)
        for _ in range(10):
            fh.write(line * 100_000)
    out = tmp_path / "warn.duckdb"
    _, cpu = cpu_and(lambda: ingest(src, out))
    assert cpu < 60
    log = load(out)
    assert log.warning_counts["ibv_create_cq"] == 1_000_000
    assert len(log.warnings) == MAX_WARNINGS_PER_KIND
    assert out.stat().st_size < 20 * 2**20
    # strings are data: kept as found (escaping is the web layer's job), JSON-safe
    assert log.warnings[0].message.endswith("<script>x</script>")
    json.dumps(log.path().to_json())


def test_distinct_connections_are_capped(tmp_path):
    src = tmp_path / "conns.log"
    n = MAX_CONNECTIONS + 5000
    with src.open("w") as fh:
        fh.write(HEAD.decode())
        for i in range(n):
            fh.write(f"h:1:1 [0] NCCL INFO Channel {i % 64:02d}/0 : {i}[0] -> {i + 1}[0] via P2P/IPC\n")
    parsed = parse_file(src)
    head = tmp_path / "head.log"
    head.write_bytes(HEAD)
    in_head = len(parse_file(head).connections)
    assert len(parsed.connections) == MAX_CONNECTIONS
    assert parsed.counters["connections_dropped"] == n + in_head - MAX_CONNECTIONS


def test_huge_numbers_and_odd_syntax_do_not_crash(tmp_path):
    src = tmp_path / "odd.log"
    src.write_text(HEAD.decode() + "\n".join([
        "h:1:1 [0] NCCL INFO Channel 999999999999999999999999999999 : 0[0] -> 1[1] via P2P/IPC",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 9" + "9" * 5000 + "[0] -> 1[1] via NET/IB/" + "7" * 5000,
        "h:1:1 [0] NCCL INFO Trees [0] " + "->" * 1000,
        "h:1:1 [0] NCCL INFO Trees [" + "[" * 10000,
        "h:1:1 [0] NCCL INFO NET/IB : Using [" * 100,
        "h:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU x / HCA (distance",
        "h:1:1 [0] NCCL INFO 99999999999999999999999999 Bytes -> Algo 77 proto 99 time nan",
        "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to <img src=x onerror=alert(1)>",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "   1e999 1 float sum -1 nan inf -inf 0 1 2 3 4",
        "     8    2     float     sum      -1    1.0   1e400   nan      0    1.0   2.0   3.0      0",
        "# Avg bus bandwidth    : nan",
        "NCCL version 99999999999999999999.1.1",
    ]) + "\n")
    out = tmp_path / "odd.duckdb"
    ingest(src, out)
    log = load(out)
    assert log.env_value("NCCL_ALGO") == "<img src=x onerror=alert(1)>"
    text = json.dumps(log.path().to_json())
    assert "NaN" not in text and "Infinity" not in text
    row = next(r for r in log.tests.rows if r.size == 8)
    assert row.oop_algbw is None and row.oop_busbw is None  # not finite: no number
    assert log.tests.avg_busbw is None


def test_atomic_publish_leaves_nothing_on_error(tmp_path):
    out = tmp_path / "x.duckdb"
    src = tmp_path / "prose.log"
    src.write_text("no nccl here\n")
    with pytest.raises(TraceError):
        ingest(src, out)
    assert list(tmp_path.iterdir()) == [src]


# ----------------------------------------------------------------------------------------------- grammar pieces
def test_version_normalisation():
    assert normalize_version("2.27.7+cuda13.0") == "2.27.7"
    assert normalize_version("20.9.8") == "2.9.8"      # PyTorch's rendering of NCCL_VERSION_CODE 20908
    assert normalize_version("21.0.3") == "2.10.3"     # ... and of 21003
    assert normalize_version("2.5.7+cudaCUDA_MAJOR.CUDA_MINOR") == "2.5.7"
    assert normalize_version("banana") is None


def test_prefixes():
    assert peel_label(" 8: cgpu09:1:2 [0] NCCL INFO x") == (8, "cgpu09:1:2 [0] NCCL INFO x")
    assert peel_label("10: Rank 10 size 16") == (10, "Rank 10 size 16")
    assert peel_label("[1,13]<stdout>:h:1:1 [5] NCCL INFO x") == (13, "h:1:1 [5] NCCL INFO x")
    assert peel_label("[STAT]:   96  8 float") == (None, "   96  8 float")
    assert peel_label("host:1:2 [0] NCCL INFO x") == (None, "host:1:2 [0] NCCL INFO x")
    assert strip_mpirun("  32  8  float  sum  -1[1,0]<stdout>:    64.00    0.00[1,0]<stderr>:x") == \
        "  32  8  float  sum  -1    64.00    0.00x"


def test_transport_strings():
    t = parse_transport("NET/IB/2(0)/GDRDMA")
    assert (t["kind"], t["net"], t["nic"], t["proxy_rank"], t["gdr"]) == ("NET", "IB", 2, 0, True)
    t = parse_transport("NET/AWS Libfabric/3/GDRDMA/Shared")
    assert (t["net"], t["nic"], t["gdr"], t["shared"]) == ("AWS Libfabric", 3, True, True)
    t = parse_transport("P2P/direct pointer/read")
    assert (t["kind"], t["mode"], t["read"]) == ("P2P", "direct pointer", True)
    assert parse_transport("SHM/direct/direct")["kind"] == "SHM"
    assert parse_transport("NET/Socket/0")["gdr"] is False


def test_lines_longer_than_the_cap_are_cut_at_the_cap(tmp_path):
    src = tmp_path / "cap.log"
    src.write_bytes(HEAD + b"#" + b"x" * (MAX_LINE_BYTES * 3) + b"\n" + b"h:1:1 [0] NCCL INFO NCCL version 2.3.4\n")
    parsed = parse_file(src)
    assert parsed.counters["truncated"] == 1 and "2.3.4" in parsed.versions


def test_control_bytes_in_strings_survive_the_store(tmp_path):
    src = tmp_path / "ctl.log"
    src.write_bytes(HEAD + b"h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to a\x00b\xff\n"
                    + b"h:1:1 [0] x.cc:1 NCCL WARN bad \x00 \x1b[31m red\n" + os.urandom(2**20) + b"\n")
    out = tmp_path / "ctl.duckdb"
    ingest(src, out)
    log = load(out)
    assert log.env_value("NCCL_ALGO") == "a\x00b\ufffd"
    assert log.warnings[0].message == "bad \x00 \x1b[31m red"
    json.dumps(log.path().to_json())


def test_repeated_and_distinct_lines_of_every_kept_kind_stay_linear(tmp_path):
    """Lines that update a kept item (GDR, NET notes, the last collective per thread, glued table pieces with
    many hosts) cost the same whether the item is new or seen: no scan over what is kept."""
    src = tmp_path / "mix.log"
    n = 60_000
    with src.open("w") as fh:
        fh.write(HEAD.decode())
        fh.write("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n")
        for i in range(n):
            fh.write(f"h{i}:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU {i} / HCA 0 (distance 9 > 2)\n")
            fh.write(f"h{i}:1:1 [0] NCCL INFO NET/IB : No device found.\n")
            fh.write(f"h{i}:{i}:1 [0] NCCL INFO AllReduce: opCount {i} sendbuff 0x1 count 8 datatype 7\n")
            fh.write(f"   {i} 2 float sum -1h{i}:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1\n")
    parsed, cpu = cpu_and(lambda: parse_file(src))
    assert cpu < 60
    assert len(parsed.gdr) <= 10_000 and len(parsed.net_notes) <= 200 and len(parsed.hosts) <= 4096


def test_the_widest_ring_of_a_channel_wins_over_a_sub_communicator(tmp_path):
    src = tmp_path / "rings.log"
    src.write_text(HEAD.decode() + "\n".join([
        "h:1:1 [0] NCCL INFO Channel 00/02 :    0   1",            # a 2-rank communicator first
        "h:1:1 [0] NCCL INFO Channel 00/04 :    0   1   2   3",    # the world
        "h:1:1 [0] NCCL INFO Channel 00/02 :    1   0",
    ]) + "\n")
    parsed = parse_file(src)
    assert parsed.rings[0]["ranks"] == [0, 1, 2, 3]


def test_collnet_and_nvls_lines_are_counted(tmp_path):
    src = tmp_path / "collnet.log"
    src.write_text(HEAD.decode() + "\n".join([
        "h:1:1 [0] NCCL INFO CollNet 00/0 : 0 [receive] via COLLNET/SHARP/0/GDRDMA",
        "h:1:1 [0] NCCL INFO CollNet 00/1 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
        "h:1:1 [0] NCCL INFO Connected CollNet",
        "h:1:1 [0] NCCL INFO NVLS multicast support is available on dev 0",
        "h:1:1 [0] NCCL INFO Connected NVLS tree",
    ]) + "\n")
    parsed = parse_file(src)
    assert parsed.channel_counts["collnet_connections"] == 2 and parsed.channel_counts["collnet_connected"] == 1
    assert parsed.nvls["available"] == 1 and parsed.nvls["connected"] is True


def test_numbers_past_any_column_and_unicode_digits_are_no_crash(tmp_path, caplog):
    big = "9" * 11            # past a 32-bit column
    huge = "9" * 5000         # past Python's int() digit limit
    src = tmp_path / "big.log"
    src.write_text(HEAD.decode() + "\n".join([
        f"h:{big}:{big} [{big}] NCCL INFO ncclCommInitRank comm 0x1 rank {big} nranks {big} cudaDev {big} busId 1 - Init START",
        f"h:1:1 [0] NCCL INFO Channel {big}/{big} : {big}[0] -> 1[1] [send] via NET/IB/{big}({big})/GDRDMA",
        f"[1,{big}]<stdout>:h:{huge}:1 [{huge}] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC",
        f"{big[:6]}: h:1:1 [0] NCCL INFO Trees [{big}] {big}/-1/-1->{big}->-1",
        "²: h:1:1 [²] NCCL INFO Channel ² : ²[0] -> 1[1] via P2P/IPC",
        f"h:1:1 [0] NCCL INFO {huge} Bytes -> Algo {huge} proto ² time 1",
        f"h:1:1 [0] NCCL INFO {huge} coll channels, ² p2p channels",
        f"h:1:1 [0] misc/x.cc:1 NCCL WARN NET/IB : Got completion with error {huge}, opcode 1",
        f"h:1:1 [0] misc/x.cc:1 NCCL WARN Unable to register memory for device {huge}",
        f"NCCL version {huge}.1.1",
        "NCCL version ².1.1",
    ]) + "\n")
    out = tmp_path / "big.duckdb"
    ingest(src, out)
    log = load(out)
    from analysis.diagnosis.nccl import findings
    found = findings(log)
    assert "rule failed" not in caplog.text  # no NET rule crashed on it either
    assert any(f.rule_id == "NET006" for f in found)
    assert any(c.channel == int(big) and c.proxy_rank == int(big) for c in log.connections)
    json.dumps(log.path().to_json())
