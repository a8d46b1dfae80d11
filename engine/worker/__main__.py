"""Entry point of the worker process: `python -m cudaforge.engine.worker SPEC.json`, or
`python -m cudaforge.engine.worker --spare WORKDIR DEVICE GPU [--lock PATH] [--cupti] [--no-counting]
[--ncu-warm]` for a pre-warmed spare (`--lock`: the per-GPU lock to hold while creating the CUDA context;
`--cupti`: also start CUPTI, for spares that ncu does not wrap; `--no-counting`: skip loading what counting
a task needs, for jobs that bring the app's counts; `--ncu-warm`: a spare under ncu launches one kernel in
the profiled range, so ncu's profiling session is set up before the job)."""

import sys

from cudaforge.engine.worker.entry import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
