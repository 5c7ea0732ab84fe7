"""Actor-kernel benchmark: ``python benchmarks/actors.py [--backend asyncio|trio|both] [--json]``.

The same as ``greenroom bench actors``; the workloads live in ``greenroom.bench.actors``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "actors", *sys.argv[1:]]))
