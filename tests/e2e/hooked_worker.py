"""`goodput worker` with test-only fault hooks, so fault tests can crash or slow one ingest on purpose.

The hooks wrap ``analysis.api.ingest`` in this process (and the pool processes it forks), keyed by the
upload's SHA-256 (its stored file name): ``GOODPUT_TEST_POISON`` lists hashes whose ingest kills the
process running it (SIGKILL), ``GOODPUT_TEST_SLOW`` lists ``sha=seconds`` to sleep before ingesting.
Production code has no hook; only this entry point, which tests start, installs them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def install_hooks() -> None:
    import analysis.api as api

    poison = set(filter(None, os.environ.get("GOODPUT_TEST_POISON", "").split(",")))
    slow = dict(item.split("=", 1) for item in filter(None, os.environ.get("GOODPUT_TEST_SLOW", "").split(",")))
    real = api.ingest

    def ingest(src, out, **kwargs):
        name = Path(src).name.split(".")[0]  # the SHA-256; stored names keep the upload's suffix
        if name in poison:
            os.kill(os.getpid(), signal.SIGKILL)
        if name in slow:
            time.sleep(float(slow[name]))
        return real(src, out, **kwargs)

    api.ingest = ingest


if __name__ == "__main__":
    install_hooks()
    from goodput_cli.main import main

    sys.exit(main(["worker", *sys.argv[1:]]))
