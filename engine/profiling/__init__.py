"""profiling part of the cudaforge engine."""
