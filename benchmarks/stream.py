"""Streaming benchmark: ``python benchmarks/stream.py [--backend B] [--json]``.

The same as ``greenroom bench stream``; the workloads live in ``greenroom.bench.stream``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "stream", *sys.argv[1:]]))
