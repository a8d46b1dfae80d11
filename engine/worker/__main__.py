"""Entry point of the worker process: `python -m cudaforge.engine.worker SPEC.json`, or
`python -m cudaforge.engine.worker --spare WORKDIR DEVICE GPU [--lock PATH] [--cupti] [--no-counting]
[--ncu-warm]` for a pre-warmed spare (`--lock`: the per-GPU lock to hold while creating the CUDA context;
`--cupti`: also start CUPTI, for spares that ncu does not wrap; `--no-counting`: skip loading what counting
a task needs, for jobs that bring the app's counts; `--ncu-warm`: a spare under ncu launches one kernel in
the profiled range, so ncu's profiling session is set up before the job)."""

import sys

from cudaforge.engine.worker.entry import main, spare_main

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--spare":
        extra = sys.argv[5:]
        lock = extra[extra.index("--lock") + 1] if "--lock" in extra[:-1] else None
        sys.exit(spare_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), lock_path=lock, warm_cupti="--cupti" in extra,
                            warm_counting="--no-counting" not in extra, warm_ncu="--ncu-warm" in extra))
    sys.exit(main(sys.argv[1:]))
