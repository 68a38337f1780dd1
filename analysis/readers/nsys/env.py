"""The allow-list applied to the profiled job's captured environment: rank, sizes, job id, host, nothing else.

Real exports keep the job's environment in three places, with secrets in all of them
(``PMI_SHARED_SECRET``, tokens, user names): ``TARGET_INFO_SYSTEM_ENV`` (one ``DeviceEnvironment`` string,
``K=V`` entries separated by ``;`` in most versions and by NUL in 2021-2022 exports such as
saxpy-mpi-rank0-perlmutter; values may hold newlines), ``META_DATA_CAPTURE`` (2023.3+: one
``PROCESS_<n>:ENVIRONMENT_VARIABLE`` row per variable, ``K="V"``) and ``StringIds`` (NUL-joined
environment blocks of the traced processes). Only the values below are kept, each checked against a
strict pattern; the rest is dropped before anything is written.
"""

from __future__ import annotations

import re

# First key found wins. The launcher's own variable beats the scheduler's: `SLURM_PROCID` is 0 for every
# rank started by one `mpirun` inside one Slurm task, while the MPI/torchrun variable is per process.
RANK_KEYS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID",
             "SLURM_PROCID")
LOCAL_RANK_KEYS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                   "MV2_COMM_WORLD_LOCAL_RANK", "PALS_LOCAL_RANKID", "SLURM_LOCALID")
WORLD_SIZE_KEYS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")
JOB_ID_KEYS = ("SLURM_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "LSB_JOBID")
HOST_KEYS = ("HOSTNAME",)
ALLOWED_KEYS = frozenset(RANK_KEYS + LOCAL_RANK_KEYS + WORLD_SIZE_KEYS + JOB_ID_KEYS + HOST_KEYS)

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"\d{1,9}\Z")
_JOB = re.compile(r"[A-Za-z0-9._\-\[\]]{1,64}\Z")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-_]{0,252}\Z")


def allowed_value(key: str, value: str) -> bool:
    """Whether ``value`` has the shape an allow-listed ``key`` takes (digits for ranks and sizes, a job id, a
    host name): a key on the list with any other value (``RANK=<secret>``) is not kept."""
    if key in RANK_KEYS or key in LOCAL_RANK_KEYS or key in WORLD_SIZE_KEYS:
        return _INT.match(value) is not None
    if key in JOB_ID_KEYS:
        return _JOB.match(value) is not None
    return key in HOST_KEYS and _HOST.match(value) is not None


_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# Entry separators seen in real exports: NUL can never occur inside a value (C strings), so a string that
# holds one is NUL-separated; otherwise ';' or newline, whichever reads the string as more K=V entries
# (';'-separated strings have multi-line values, and newline-separated ones have values with ';').
SEPARATORS = (";", "\n")


def split_entries(environment: str) -> list[str]:
    """The ``K=V`` entries of a captured environment string, whichever separator the export used."""
    if "\x00" in environment:
        return environment.split("\x00")
    best: list[str] = [environment]
    for sep in SEPARATORS:
        items = [i.rstrip("\r") for i in environment.split(sep)]
        if sum(1 for i in items if _ENTRY.match(i)) > sum(1 for i in best if _ENTRY.match(i)):
            best = items
    return best


def parse_allowed(environment: str | None) -> dict[str, str]:
    """The allow-listed variables of a captured environment string (other keys are never returned)."""
    out: dict[str, str] = {}
    if not environment:
        return out
    for item in split_entries(environment):
        key, eq, value = item.partition("=")
        # A value holding the separator spills into the next item; such an item has no valid KEY= and is skipped.
        if eq and _KEY.match(key) and key in ALLOWED_KEYS and key not in out:
            out[key] = value
    return out


def parse_capture(entries: list[str]) -> dict[str, str]:
    """The allow-listed variables of ``META_DATA_CAPTURE`` entries (``K="V"``, one variable each)."""
    out: dict[str, str] = {}
    for item in entries:
        key, eq, value = item.partition("=")
        if eq and _KEY.match(key) and key in ALLOWED_KEYS and key not in out:
            out[key] = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    return out


def _first(env: dict[str, str], keys: tuple[str, ...], pattern: re.Pattern) -> str | None:
    for key in keys:
        value = env.get(key, "").strip()
        if value and pattern.match(value):
            return value
    return None


def _facts(env: dict[str, str]) -> dict[str, str | None]:
    return {
        "rank": _first(env, RANK_KEYS, _INT),
        "local_rank": _first(env, LOCAL_RANK_KEYS, _INT),
        "world_size": _first(env, WORLD_SIZE_KEYS, _INT),
        "job_id": _first(env, JOB_ID_KEYS, _JOB),
        "host": _first(env, HOST_KEYS, _HOST),
    }


def _agreed(envs: list[dict[str, str]]) -> dict[str, str | None]:
    """The facts all the processes that state them agree on (several ranks in one file: no single rank)."""
    values: dict[str, set[str]] = {}
    for facts in (_facts(e) for e in envs):
        for key, value in facts.items():
            if value is not None:
                values.setdefault(key, set()).add(value)
    return {k: next(iter(v)) if len(v) == 1 else None for k, v in values.items()}


def job_facts(device_environment: str | None, hostname: str | None,
              processes: list[dict[str, str]] | None = None,
              blocks: list[str] | None = None) -> dict[str, str | None]:
    """rank, local_rank, world_size, job_id and host, each None when unknown or malformed.

    Each fact comes from the first place that states it: ``device_environment`` (TARGET_INFO_SYSTEM_ENV),
    then ``processes`` (the allow-listed captured variables of each launched process, from
    ``META_DATA_CAPTURE``), then ``blocks`` (environment blocks from ``StringIds``); from the last two
    only when every process or block that states the fact agrees.

    ``hostname`` is nsys' own ``Hostname`` record of the profiled node; it beats ``$HOSTNAME``, which
    an MPI launcher copies from the node it was started on (nccl-ring-2node-r1: ault44 says ault43).
    """
    sources = [_facts(parse_allowed(device_environment)), _agreed(processes or []),
               _agreed([parse_allowed(b) for b in blocks or []])]
    out: dict[str, str | None] = dict.fromkeys(("rank", "local_rank", "world_size", "job_id", "host"))
    for key in out:
        out[key] = next((s[key] for s in sources if s.get(key)), None)
    host = hostname.strip() if hostname and _HOST.match(hostname.strip()) else None
    out["host"] = host or out["host"]
    return out
