"""Soak benchmark, a real daemon under API load: ``python benchmarks/soak.py [--seconds N] [--json]``.

The same as ``greenroom bench soak``; the workloads live in ``greenroom.bench.soak``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "soak", *sys.argv[1:]]))
