"""Pipeline benchmark: ``python benchmarks/pipeline.py [--backend B] [--json]``.

The same as ``greenroom bench pipeline``; the workloads live in ``greenroom.bench.pipeline``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "pipeline", *sys.argv[1:]]))
