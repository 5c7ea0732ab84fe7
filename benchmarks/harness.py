"""Harness benchmark: ``python benchmarks/harness.py [--backend asyncio|trio|both]
[--actors N] [--iterations N] [--latency-ms MS] [--json]``.

The same as ``greenroom bench harness``; the workloads live in ``greenroom.bench.harness``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "harness", *sys.argv[1:]]))
