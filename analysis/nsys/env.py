"""The allow-list applied to the profiled job's captured environment: rank, sizes, job id, host, nothing else.

``TARGET_INFO_SYSTEM_ENV`` holds the job's whole environment (``DeviceEnvironment``, ``K=V;K=V``) and
real exports carry secrets in it (``PMI_SHARED_SECRET``, tokens, user names). Only the values below are
kept, each checked against a strict pattern; the rest is dropped before anything is written.
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


def parse_allowed(device_environment: str | None) -> dict[str, str]:
    """The allow-listed variables of a ``K=V;K=V`` string (other keys are never returned)."""
    out: dict[str, str] = {}
    if not device_environment:
        return out
    for item in device_environment.split(";"):
        key, eq, value = item.partition("=")
        # A value holding ';' spills into the next item; such an item has no valid KEY= and is skipped.
        if eq and _KEY.match(key) and key in ALLOWED_KEYS and key not in out:
            out[key] = value
    return out


def _first(env: dict[str, str], keys: tuple[str, ...], pattern: re.Pattern) -> str | None:
    for key in keys:
        value = env.get(key, "").strip()
        if value and pattern.match(value):
            return value
    return None


def job_facts(device_environment: str | None, hostname: str | None) -> dict[str, str | None]:
    """rank, local_rank, world_size, job_id and host, each None when unknown or malformed.

    ``hostname`` is nsys' own ``Hostname`` record of the profiled node; it beats ``$HOSTNAME``, which
    an MPI launcher copies from the node it was started on (nccl-ring-2node-r1: ault44 says ault43).
    """
    env = parse_allowed(device_environment)
    host = hostname.strip() if hostname and _HOST.match(hostname.strip()) else None
    return {
        "rank": _first(env, RANK_KEYS, _INT),
        "local_rank": _first(env, LOCAL_RANK_KEYS, _INT),
        "world_size": _first(env, WORLD_SIZE_KEYS, _INT),
        "job_id": _first(env, JOB_ID_KEYS, _JOB),
        "host": host or _first(env, HOST_KEYS, _HOST),
    }
