"""llm part of the cudaforge engine."""
