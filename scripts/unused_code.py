"""The unused-code check of ``make lint``: vulture over the packages, reporting unused functions, classes,
methods and imports only; exit 3 when it finds any (vulture's own code for dead code), 1 on unreadable input.

Configured in pyproject's ``[tool.vulture]`` (paths, with ``scripts/vulture_whitelist.py`` for framework entry
points, ``min_confidence``, the decorators that mark entry points); arguments are vulture's and override it.
Unused variables, attributes and properties are not reported: at this confidence they are mostly dataclass
and ORM fields read through ``asdict`` or the database, and properties read by Jinja templates, which vulture
does not see.

    .venv/bin/python scripts/unused_code.py
"""

from __future__ import annotations

import sys

from vulture.config import make_config
from vulture.core import Vulture
from vulture.utils import ExitCode

KINDS = ("function", "class", "method", "import")


def main(argv: list[str] | None = None) -> int:
    config = make_config(sys.argv[1:] if argv is None else argv)
    vulture = Vulture(verbose=config["verbose"], ignore_names=config["ignore_names"],
                      ignore_decorators=config["ignore_decorators"])
    vulture.scavenge(config["paths"], exclude=config["exclude"])
    unused = [item for item in vulture.get_unused_code(min_confidence=config["min_confidence"])
              if item.typ in KINDS]
    for item in unused:
        print(item.get_report())
    if vulture.exit_code == ExitCode.InvalidInput:  # a file it could not read or parse, said on stderr
        return ExitCode.InvalidInput
    return ExitCode.DeadCode if unused else ExitCode.NoDeadCode


if __name__ == "__main__":
    sys.exit(main())
