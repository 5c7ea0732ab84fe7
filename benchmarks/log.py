"""Event-log benchmark: ``python benchmarks/log.py [--backend asyncio|trio|both] [--agents N] [--json]``.

The same as ``greenroom bench log``; the workloads live in ``greenroom.bench.log``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "log", *sys.argv[1:]]))
