"""Entry point of the worker process: `python -m cudaforge.engine.worker SPEC.json`."""

import sys

from .harness import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
