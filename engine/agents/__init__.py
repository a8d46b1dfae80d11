"""agents part of the cudaforge engine."""
