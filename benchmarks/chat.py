"""Chat-runner benchmark: ``python benchmarks/chat.py [--backend B] [--json]``.

The same as ``greenroom bench chat``; the workloads live in ``greenroom.bench.chat``.
"""

import sys

from greenroom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "chat", *sys.argv[1:]]))
