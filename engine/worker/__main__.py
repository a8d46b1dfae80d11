"""Entry point of the worker process: `python -m cudaforge.engine.worker SPEC.json`, or
`python -m cudaforge.engine.worker --spare WORKDIR DEVICE GPU` for a pre-warmed spare."""

import sys

from .harness import main, spare_main

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--spare":
        sys.exit(spare_main(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(main(sys.argv[1:]))
