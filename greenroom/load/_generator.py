"""The entry point of one generator process of ``greenroom load --processes``:
``python -m greenroom.load._generator`` reads its job on stdin (``_processes.main``). A
module of its own, which the package does not import, so running it is not importing it
twice."""

from __future__ import annotations

from ._processes import main

if __name__ == "__main__":
    main()
