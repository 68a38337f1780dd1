"""The idle anatomy's vocabulary: what a host can be doing while its GPU idles, most specific first.

Each category is a code (its position in ``CATEGORIES``, which is also the specificity order: an instant
covered by several kinds of host activity belongs to the first). CUDA API and OS runtime calls are
classified by name here, once per distinct name; NVTX ranges by domain and text in SQL.
"""

from __future__ import annotations

import re

# The documented vocabulary, in specificity order. ``cuda_other`` holds the CUDA calls no other class
# names (device and context queries, event records, stream waits, graph building).
#
# ``uvm_migration`` is GPU-side evidence, not a host call: an idle instant between two unified-memory page
# migrations of the same device (the GPU operations just before and just after the idle piece are both
# migrations, the export's memcpy rows of kind ``UVM_*``): the driver moves pages a batch at a time as the host
# touches them. Any recorded host activity wins over it (a CUDA call, a sync the host waits in, an OS call, a
# range, a CPU sample), because what the host was seen doing is the more specific cause (the corpus labels say
# so: clue-um-t4's idle between migrations is printf formatting in CPU samples, stdpar-um-gpu's is pwrite64
# output), and idle with nothing else recorded is put down to the migrations (unified-memory-a100's read-back
# after its kernel: 1,536 DtoH migrations, nothing traced).
#
# ``off_cpu``: the speaking thread was switched out by the scheduler (the export's SCHED_EVENTS, normalized as
# ``off_cpu`` stretches: switch-out to the next switch-in) and nothing more specific was recorded: it slept or
# blocked outside any traced call (an untraced lock, I/O, a wait on another thread), or was preempted. After
# ``host_cpu``: a CPU sample says what ran, and a sample's half period may overlap the switch-out; a traced
# call or range the thread was switched out inside says why, so it wins too. After ``uvm_migration`` as well:
# a thread that touches a managed page resident on the GPU faults and waits, often switched out, while the
# driver migrates the page back, so off CPU between migrations is the migration's symptom, not another cause
# (unified-memory-a100: 10.0 ms of its read-back, which the labels count as off CPU; argued in
# tests/analysis/test_idle_anatomy_labels.py). Empty for exports without the scheduler's events (nsys profile
# --cpuctxsw=none, or no CPU sampling), which leave those instants ``none``.
CATEGORIES = ("allocation", "sync", "sync_copy", "memset", "launch", "jit_module", "nccl_setup", "cuda_other",
              "mpi", "os_io", "os_wait", "os_other", "user_range", "host_cpu", "uvm_migration", "off_cpu", "none")
CODE = {c: i for i, c in enumerate(CATEGORIES)}
NONE = CODE["none"]

# How prose names each category ("the host was: in allocation calls 143 ms, nothing recorded 77.7 ms").
WORDS = {"allocation": "in allocation calls", "sync": "in synchronization calls", "sync_copy": "in copy calls",
         "memset": "in memset calls", "launch": "in launch calls", "jit_module": "compiling or loading modules",
         "nccl_setup": "creating NCCL communicators", "cuda_other": "in other CUDA calls",
         "mpi": "communicating (MPI or NCCL ranges)", "os_io": "in file or network I/O",
         "os_wait": "waiting (locks, sleeps, polls)", "os_other": "in other OS calls", "user_range": "in user NVTX ranges",
         "host_cpu": "sampled on CPU", "uvm_migration": "between unified-memory migrations",
         "off_cpu": "switched out (off CPU)", "none": "nothing recorded"}

# The name an off-CPU stretch paints with (SQL over the ``off_cpu`` table): what it blocked on when the export
# says (nsys >= 2024.5 on some kernels), else its state when informative, else plain "off CPU".
OFF_CPU_NAME_SQL = ("(CASE WHEN block IS NOT NULL AND block NOT IN ('non_blocked', 'unknown') THEN 'off CPU: ' || block "
                    "WHEN state IS NOT NULL AND state NOT IN ('unknown', 'running') THEN 'off CPU: ' || state "
                    "ELSE 'off CPU' END)")

# CUDA runtime and driver API names (without the _vNNNN suffix), first match wins.
_CUDA_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("allocation", re.compile(
        r"^cu(da)?(Malloc|Free|MemAlloc|MemFree|HostAlloc|HostRegister|HostUnregister|MemHostAlloc|MemHostRegister|"
        r"MemHostUnregister|MallocHost|FreeHost|MemPool|ArrayCreate|ArrayDestroy|Array3DCreate|MipmappedArray|"
        r"MemCreate|MemRelease|MemMap|MemUnmap|MemAddressReserve|MemAddressFree)")),
    ("sync", re.compile(r"^cu(da)?((Device|Stream|Thread|Event|Ctx)Synchronize|StreamQuery|EventQuery)")),
    ("sync_copy", re.compile(r"^cu(da)?Memcpy")),
    ("memset", re.compile(r"^cu(da)?Memset")),
    ("launch", re.compile(r"^cu(da)?(LaunchKernel|LaunchCooperativeKernel|Launch|GraphLaunch|LaunchHostFunc)")),
    ("jit_module", re.compile(
        r"^(nvrtc|nvJitLink|cu(da)?(Module|Library|Link|GetFuncBySymbol|GetKernel|KernelGet|FuncGet|FuncSet))")),
)

# OS runtime names: file and network I/O, waiting on locks, sleeps and polls; the rest is ``os_other``.
_OS_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("os_io", re.compile(
        r"^(read|write|pread|pwrite|readv|writev|preadv|pwritev|open|openat|fopen|fdopen|fclose|close|fread|fwrite|"
        r"fflush|fsync|fdatasync|sync_file_range|lseek|fseek|ftell|stat|fstat|lstat|statx|getdents|fgets|fputs|"
        r"fputc|fprintf|vfprintf|fscanf|unlink|rename|mkdir|rmdir|truncate|ftruncate|sendfile|splice|"
        r"socket|connect|accept|bind|listen|send|sendto|sendmsg|sendmmsg|recv|recvfrom|recvmsg|recvmmsg|"
        r"shutdown|getaddrinfo|io_submit|io_getevents|aio_)")),
    ("os_wait", re.compile(
        r"^(pthread_mutex_lock|pthread_mutex_timedlock|pthread_rwlock|pthread_cond_wait|pthread_cond_timedwait|"
        r"pthread_join|pthread_barrier_wait|pthread_spin_lock|sem_wait|sem_timedwait|sem_clockwait|futex|"
        r"sleep|usleep|nanosleep|clock_nanosleep|sched_yield|poll|ppoll|select|pselect|epoll_wait|epoll_pwait|"
        r"wait|waitpid|waitid|pause|sigwait|sigtimedwait|flock|lockf)")),
)

# NVTX: host communication (MPI, NCCL, UCX) by domain or by the call name the range carries; NCCL's
# communicator set-up by name; compilation by name. Everything else is a user range.
NVTX_COMM_DOMAIN_RE = r"(?i)^(mpi|nccl|ucx|nvshmem|openmpi|mpich)"
NVTX_COMM_TEXT_RE = r"^(MPI_|PMPI_|nccl|ucp_|shmem_)"
# Ranges that name compilation or JIT work (nvFuser's compileFusion, Triton and Inductor compiles, NVRTC,
# autotuning): ``jit_module`` like the CUDA module-loading calls.
NVTX_JIT_RE = r"(?i)(compil|jit|nvrtc|triton|inductor|nvfuser|autotun)"
NVTX_NCCL_SETUP_RE = r"^nccl(CommInit|CommSplit|GetUniqueId|CommInitRank|CommInitAll|CommInitRankConfig)"


def _strip_version(name: str) -> str:
    return re.sub(r"_v\d+$", "", name)


def cuda_class(name: str) -> int:
    """The category code of a CUDA API call's name (``cuda_other`` when no class matches)."""
    n = _strip_version(name)
    for cat, pattern in _CUDA_CLASSES:
        if pattern.search(n):
            return CODE[cat]
    return CODE["cuda_other"]


def os_class(name: str) -> int:
    """The category code of an OS runtime call's name (``os_other`` when no class matches)."""
    n = name.lstrip("_")
    for cat, pattern in _OS_CLASSES:
        if pattern.search(n):
            return CODE[cat]
    return CODE["os_other"]
