"""The normalized trace schema: one DuckDB file per report, whatever tool or version wrote the export.

Conventions every reader must honour and every rule may rely on:

* Times are integer nanoseconds relative to the session start (``*_ns`` columns), even when the
  export stored absolute UTC nanoseconds. The session's UTC start is ``meta['session_start_utc_ns']``
  (absent when the export does not record it), so ``session_start_utc_ns + start_ns`` is wall-clock
  time and the ranks of one job can be aligned. Never compute that sum in 64-bit arithmetic (it is
  ~1.7e18, and sums or products of such times overflow): align ranks with ``Run.offsets``, the
  differences of their session starts, and keep every other computation on differences of times.
* ``meta['degraded']``, when present, is JSON listing the parts of the export that could not be read
  (``{table, columns, effect}``): those values are NULL in the tables.
* ``device`` is the CUDA ordinal as the profiled process saw it (``KERNEL.deviceId``), never the
  nsys GPU id; ``devices`` maps it to the physical GPU.
* ``pid``/``tid`` are OS ids (decoded from nsys' packed ``globalPid``/``globalTid``).
* Strings are stored resolved (no string-id indirection) and exactly as the export had them; the one
  exception is the kernels' mangled name, read only to find a kernel by it (``kernels.mangled_id`` into
  ``mangled_names``).
* A column holding one of our own fixed words (``kernels.category``, ``cuda_api.kind``, ``sync.sync_type``, the
  copy and memory kinds) is a DuckDB ``ENUM`` of them in byte order, so it sorts, compares and groups as the
  same VARCHAR would (only ``hash()`` differs); files of schema version 5 and earlier store VARCHAR.
* A table the export did not have exists and is empty.

Bump ``SCHEMA_VERSION`` on any change; stored reports record the version they were written with.
"""

from __future__ import annotations

SCHEMA_VERSION = 6  # 2: cpu_samples; 3: iterations (derived at ingest, see analysis.loops.steps), nccl_calls,
# gpu_metrics, nic_metrics, nics; 4: net_transfers (derived at ingest, see analysis.readers.nsys.net); 5: off_cpu
# Versions this code reads: a version-2 file lacks the version-3 tables; the analysis computes the iterations
# itself and the rules and summaries that read the others find no rows (skipped, empty summaries). A
# version-3 file lacks net_transfers: the analysis reads the same rows from its NVTX table. A version-4 file
# lacks off_cpu: its idle anatomy paints no ``off_cpu`` (those instants stay ``none``) until it is ingested again.
# 6: the vocabulary columns are ENUMs, the mangled kernel names are stored once each (``mangled_names``); a file of
# an earlier version stores them as VARCHAR in every row, and the readers of ``mangled_name`` look for either.
READABLE_SCHEMA_VERSIONS = (2, 3, 4, 5, 6)

# Decoded vocabularies (the values the readers write; since schema 6 the columns of the kernels, copies, memsets,
# CUDA API calls and syncs that hold them are ENUMs, see `_enum`; the small tables keep VARCHAR).
KERNEL_CATEGORIES = ("compute", "nccl", "graph")
COPY_KINDS = (
    "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA",
    "UVM_HtoD", "UVM_DtoH", "UVM_DtoD", "unknown",
)
MEMORY_KINDS = ("pageable", "pinned", "device", "array", "managed", "device_static", "managed_static", "unknown")
SYNC_TYPES = ("event", "stream_wait_event", "stream", "context", "unknown")
LINK_LAYERS = ("ethernet", "infiniband", "unknown")
API_KINDS = ("runtime", "driver")
NVTX_KINDS = ("push_pop", "start_end", "mark")
# SCHED_EVENTS.threadState and .threadBlock (analysis.readers.nsys.enums.THREAD_STATE, THREAD_BLOCK).
THREAD_STATES = ("unknown", "running", "interruptible", "uninterruptible", "stopped", "terminated", "unscheduled",
                 "waiting", "os_runtime", "initialized", "transition")
THREAD_BLOCKS = ("non_blocked", "unknown", "sig_suspend", "stopped", "nanosleep", "intr", "mutex", "cond_var", "sem",
                 "join", "sig_wait_info", "wait_ctx", "send", "receive", "reply", "stack", "wait_thread",
                 "wait_page", "net_send", "net_reply", "free_page", "page_in", "pool_allocation", "delay_execution",
                 "suspended", "user_request", "event_pair", "queue", "lpc_receive", "lpc_reply", "virtual_memory",
                 "page_out", "rendezvous", "keyed_event", "terminated", "process_in_swap", "cpu_rate_control",
                 "wr_callout_stack", "kernel", "resource", "push_lock", "windows_mutex", "quantum_end",
                 "dispatch_int", "preempted", "yield_execution", "fast_mutex", "guarded_mutex", "rundown",
                 "ready_to_run", "alert_by_thread_id", "deferred_preempt", "physical_fault", "mq_send",
                 "mq_receive", "muon_mutex", "barrier", "rwlock_read", "rwlock_write", "trace_buffer",
                 "interrupt_attach_event", "timer_delegate")


def _enum(words: tuple[str, ...]) -> str:
    """A DuckDB ENUM of our own words, declared in byte order: its ORDER BY, min and max are those of VARCHAR."""
    assert all(w.replace("_", "").isalnum() for w in words)
    return "ENUM(" + ", ".join(f"'{w}'" for w in sorted(set(words))) + ")"


NSYS_TABLES: dict[str, str] = {
    "meta": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR
    """,
    "devices": """
        device INTEGER,            -- CUDA ordinal as seen by `pid` (NULL pid: same for every process)
        pid INTEGER,
        gpu_id INTEGER,            -- nsys' TARGET_INFO_GPU.id
        name VARCHAR,
        uuid VARCHAR,
        bus_location VARCHAR,
        sm_count INTEGER,
        memory_bytes BIGINT,
        memory_bandwidth_bps BIGINT,
        l2_cache_bytes BIGINT,
        clock_rate_hz BIGINT,
        cc_major INTEGER,
        cc_minor INTEGER,
        max_warps_per_sm INTEGER,
        max_blocks_per_sm INTEGER,
        max_regs_per_sm INTEGER,
        max_shmem_per_sm INTEGER
    """,
    "processes": """
        pid INTEGER,
        name VARCHAR
    """,
    "threads": """
        pid INTEGER,
        tid INTEGER,
        name VARCHAR
    """,
    "kernels": f"""
        device INTEGER,
        context_id BIGINT,
        stream BIGINT,
        pid INTEGER,
        tid INTEGER,               -- thread of the launching API call; NULL when it is not in the trace
        start_ns BIGINT,
        end_ns BIGINT,
        correlation_id BIGINT,
        name VARCHAR,              -- demangled name
        short_name VARCHAR,
        mangled_id BIGINT,         -- its mangled name: mangled_names.id
        grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
        block_x INTEGER, block_y INTEGER, block_z INTEGER,
        registers INTEGER,
        static_smem INTEGER,
        dynamic_smem INTEGER,
        graph_id BIGINT,
        category {_enum(KERNEL_CATEGORIES)}  -- 'graph': a CUDA graph replay traced whole
    """,
    # One row per mangled kernel name the kernels use (kernels.mangled_id): 300-byte names, read only to find a kernel
    # by its mangled name (``analysis.views.timeline.kernel_instances``), not written again in every row.
    "mangled_names": """
        id BIGINT,
        name VARCHAR
    """,
    "memcpy": f"""
        device INTEGER,
        context_id BIGINT,
        stream BIGINT,
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        correlation_id BIGINT,
        copy_kind {_enum(COPY_KINDS)},
        bytes BIGINT,
        src_kind {_enum(MEMORY_KINDS)},
        dst_kind {_enum(MEMORY_KINDS)},
        src_device INTEGER,
        dst_device INTEGER
    """,
    "memset": f"""
        device INTEGER,
        context_id BIGINT,
        stream BIGINT,
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        correlation_id BIGINT,
        bytes BIGINT,
        value INTEGER,
        mem_kind {_enum(MEMORY_KINDS)}
    """,
    "cuda_api": f"""
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        name VARCHAR,              -- without the _vNNNN suffix
        kind {_enum(API_KINDS)},  -- backtrace duplicates are dropped
        correlation_id BIGINT,
        return_value BIGINT
    """,
    "sync": f"""
        device INTEGER,
        context_id BIGINT,
        stream BIGINT,
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        correlation_id BIGINT,
        sync_type {_enum(SYNC_TYPES)},
        event_id BIGINT
    """,
    "nvtx": """
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,             -- NULL for marks
        text VARCHAR,
        domain VARCHAR,            -- NULL for the default domain
        kind VARCHAR,              -- 'push_pop' | 'start_end' | 'mark'
        nesting INTEGER
    """,
    "osrt": """
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        name VARCHAR
    """,
    "cpu_samples": """
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        cpu INTEGER,               -- the CPU the thread ran on
        function VARCHAR,          -- the leaf (innermost, stack depth 0) function of the call chain; NULL if none
        module VARCHAR             -- its module (shared object or executable)
    """,
    # The scheduler's events (nsys profile --cpuctxsw=process-tree, the default with CPU sampling): one row per
    # stretch a thread spent off CPU, from its switch-out to its next switch-in on any CPU. A switch-out with
    # no switch-in after it (the thread ended, or the capture did) gives no row: where the thread was after
    # it is not recorded, and the idle anatomy never paints time it cannot show.
    "off_cpu": """
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,           -- switched out
        end_ns BIGINT,             -- switched in again
        cpu INTEGER,               -- the CPU it left
        state VARCHAR,             -- its state when switched out, see THREAD_STATES (NULL before nsys 2024.5)
        block VARCHAR              -- what it blocked on, see THREAD_BLOCKS (NULL when the export does not say)
    """,
    "nccl_calls": """
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        name VARCHAR,              -- the NCCL API call's NVTX range, e.g. 'ncclAllReduce', 'ncclSend'
        bytes BIGINT,              -- its payload's 'Message size [bytes]'; NULL when the export has none
        nranks INTEGER,            -- a communicator-init call's 'No. of ranks'; NULL otherwise
        comm_id VARCHAR            -- the payload's 'NCCL communicator ID' (decimal), when it carries one
    """,
    "gpu_metrics": """
        source VARCHAR,            -- what was sampled, as the export names it (TARGET_INFO_GPU_METRICS.typeName)
        metric VARCHAR,            -- e.g. 'PCIe RX Throughput [Throughput %]', 'SMs Active [Throughput %]'
        start_ns BIGINT,           -- the sample's time
        value DOUBLE
    """,
    "nics": """
        nic_id INTEGER,            -- the host's network interfaces nsys listed (TARGET_INFO_NIC_INFO)
        name VARCHAR,              -- e.g. 'mlx5_0'
        state VARCHAR,
        link_layer VARCHAR,        -- see LINK_LAYERS
        model VARCHAR              -- the PCIe device's label (ENUM_NET_DEVICE_ID), e.g. 'ConnectX-6'
    """,
    "nic_metrics": """
        nic VARCHAR,               -- the NIC's name (TARGET_INFO_NIC_INFO), else its id
        port INTEGER,
        metric VARCHAR,            -- TARGET_INFO_NETWORK_METRICS.name, e.g. 'Bytes received'
        unit VARCHAR,
        start_ns BIGINT,           -- the counter's interval
        end_ns BIGINT,
        value DOUBLE
    """,
    "overhead": """
        pid INTEGER,
        tid INTEGER,
        start_ns BIGINT,
        end_ns BIGINT,
        name VARCHAR               -- profiler overhead (e.g. CUPTI buffer flush); counts as GPU-busy
    """,
}

# Tables derived at ingest from the normalized ones (not read from the export), written before the file is
# published; a file of an older schema version lacks them and the analysis computes them instead.
DERIVED_TABLES: dict[str, str] = {
    # Every iteration of the report's loop with its exact GPU time partition (see analysis.loops.steps); the
    # loop's other facts (source, signature, unit, NVTX step summary) are meta['loop'], JSON.
    "iterations": """
    idx INTEGER,               -- 0-based, in time order (the loop's iteration number)
    phase VARCHAR,             -- 'warmup' | 'steady'
    pid INTEGER,               -- the GPU unit the parts are measured on
    device INTEGER,
    start_ns BIGINT,
    end_ns BIGINT,             -- the next iteration's start; the last one's own end
    own_end_ns BIGINT,         -- the iteration's own end (its last operation, or its NVTX range's end)
    ns BIGINT,                 -- end_ns - start_ns
    gpu_busy_ns BIGINT,        -- union of the unit's GPU operations inside the iteration
    compute_ns BIGINT,
    comm_exposed_ns BIGINT,
    comm_overlapped_ns BIGINT,
    memory_only_ns BIGINT,
    idle_ns BIGINT             -- compute + comm_exposed + memory_only + idle == ns
    """,
    # One row per network request NCCL posted (its ncclNetIsend/ncclNetIrecv NVTX event with arguments),
    # with the poll that found it done (see analysis.readers.nsys.net).
    "net_transfers": """
    pid INTEGER,
    tid INTEGER,
    direction VARCHAR,         -- 'send' | 'recv' (this process's side of the transfer)
    sender_rank INTEGER,       -- NCCL's ranks in the communicator, as the range's arguments name them
    receiver_rank INTEGER,
    channel INTEGER,
    sequence BIGINT,
    bytes BIGINT,              -- Data_Size
    post_ns BIGINT,            -- the Isend/Irecv event
    done_ns BIGINT             -- the Test poll that reported it done; NULL when none was recorded
    """,
}

NCU_TABLES: dict[str, str] = {
    "meta": NSYS_TABLES["meta"],
    "ncu_kernels": """
        kernel_id INTEGER,         -- ncu's profiled launch ID
        name VARCHAR,              -- demangled
        short_name VARCHAR,
        pid INTEGER,
        process_name VARCHAR,
        host VARCHAR,
        device INTEGER,
        cc VARCHAR,
        context BIGINT,
        stream BIGINT,
        grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
        block_x INTEGER, block_y INTEGER, block_z INTEGER,
        registers INTEGER,
        shared_mem_bytes BIGINT,
        duration_ns DOUBLE,
        device_name VARCHAR,
        block_size INTEGER,        -- threads per block; grid_size: blocks in the grid
        grid_size BIGINT
    """,
    "ncu_metrics": """
        kernel_id INTEGER,
        section VARCHAR,
        metric VARCHAR,            -- ncu's metric name or display name, as exported
        unit VARCHAR,              -- normalized base unit ('ns', 'B', 'B/s', '%', 'Hz', '' ...)
        value DOUBLE,              -- in `unit`; NULL when the text is not a number ('n/a')
        text VARCHAR,              -- the original cell text
        orig_unit VARCHAR
    """,
    "ncu_rule_results": """
        kernel_id INTEGER,
        section VARCHAR,
        rule VARCHAR,
        type VARCHAR,
        message VARCHAR,
        speedup_type VARCHAR,
        speedup_pct DOUBLE
    """,
}


def ddl(tables: dict[str, str]) -> list[str]:
    """CREATE TABLE statements for a tool's normalized tables."""
    # The closing parenthesis goes on its own line: a column's trailing `-- comment` would swallow it.
    return [f"CREATE TABLE {name} (\n{cols.strip()}\n)" for name, cols in tables.items()]


def columns(tables: dict[str, str], name: str) -> list[str]:
    """Column names of one normalized table, in order (parsed from its DDL)."""
    body = " ".join(raw.split("--", 1)[0] for raw in tables[name].splitlines())
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in body + ",":  # top-level commas only: an ENUM's words are inside its parentheses
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += (ch == "(") - (ch == ")")
        cur.append(ch)
    return [words[0] for part in parts if (words := part.split()) and words[0].upper() not in {"PRIMARY"}]
