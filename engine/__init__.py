"""cudaforge engine: UI-free core that loads tasks, evaluates candidate kernels and runs sessions."""

__version__ = "0.1.0"
