"""Task-graph benchmark: ``python benchmarks/graph.py [--backend B] [--sizes 1000,...] [--json]``.

The same as ``greenroom bench graph``; the workloads live in ``greenroom.bench.graph``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "graph", *sys.argv[1:]]))
