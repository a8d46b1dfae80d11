"""The app side of an evaluation: the async Evaluator and Profiler, the sandbox that starts workers, the
pre-warmed spare, the result cache and the fit check. The worker side lives in engine/worker/."""
