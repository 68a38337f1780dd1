"""OS runtime calls by class, as nsys' ``--trace=osrt`` records them: the vocabulary HOST001 and the storage
summary share (the anatomy's coarser ``os_*`` categories are in ``analysis.diagnosis.idle_classes``)."""

from __future__ import annotations

# OS runtime calls by class (names as nsys' osrt trace records them, with the 64-bit variants' suffix and
# leading underscores removed). read/write cannot tell files from pipes and sockets: they count as file I/O.
CLASSES: dict[str, tuple[str, ...]] = {
    "file_io": ("read", "pread", "readv", "preadv", "preadv2", "write", "pwrite", "writev", "pwritev", "pwritev2",
                "fread", "fwrite", "fgets", "fputs", "getc", "putc", "fgetc", "fputc", "fscanf", "fprintf",
                "open", "openat", "fopen", "fdopen", "freopen", "close", "fclose", "fsync", "fdatasync", "fflush",
                "sync_file_range", "stat", "fstat", "lstat", "fstatat", "statx", "access", "lseek", "unlink",
                "rename", "mkdir", "opendir", "readdir", "closedir", "ftruncate", "truncate", "io_submit",
                "io_getevents", "io_uring_enter", "sendfile", "copy_file_range", "splice", "flock", "fcntl"),
    "lock_wait": ("futex", "pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_cond_wait",
                  "pthread_cond_timedwait", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
                  "pthread_rwlock_timedrdlock", "pthread_rwlock_timedwrlock", "sem_wait", "sem_timedwait",
                  "pthread_join", "pthread_barrier_wait", "wait", "waitpid", "waitid", "pthread_spin_lock"),
    "poll": ("poll", "ppoll", "select", "pselect", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"),
    "sleep": ("sleep", "usleep", "nanosleep", "clock_nanosleep", "sched_yield"),
    "network": ("recv", "recvfrom", "recvmsg", "recvmmsg", "send", "sendto", "sendmsg", "sendmmsg", "accept",
                "accept4", "connect", "shutdown"),
    "driver_ioctl": ("ioctl",),
    "memory": ("mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "sbrk", "mlock", "munlock"),
}
_CLASS_OF = {name: cls for cls, names in CLASSES.items() for name in names}


WRITES = frozenset(("write", "pwrite", "writev", "pwritev", "pwritev2", "fwrite", "fputs", "putc", "fputc",
                    "fprintf", "fsync", "fdatasync", "fflush", "sync_file_range"))


def base_name(name: str | None) -> str:
    """The call name without leading underscores and the 64-bit variants' suffix."""
    base = (name or "").lstrip("_")
    return base[:-2] if base.endswith("64") else base


def os_class(name: str | None) -> str:
    """The class of an OS runtime call name (see ``CLASSES``), ``other`` when none fits."""
    return _CLASS_OF.get(base_name(name), "other")
