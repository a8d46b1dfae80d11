"""worker part of the cudaforge engine."""
