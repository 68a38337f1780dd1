"""What every reader of an untrusted export is given: its resource ``Limits`` and a ``Progress`` callback.

Its own module (stdlib only) so that the readers (``analysis.readers.nsys``, ``analysis.readers.ncu``) and the facade
(``analysis.api``) all import it at the top, with no cycle between the facade and the readers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Progress = Callable[[str, int, int], None]  # (stage or table, done, total)


@dataclass(frozen=True)
class Limits:
    """Resource limits for reading one untrusted export."""

    max_bytes: int = 20 * 1024**3
    timeout_s: float = 3600.0
    memory_bytes: int = 2 * 1024**3      # address-space cap of the child process doing the bulk copy
    threads: int = 2
