"""Textual workbench (cudaforge-tui); talks to the engine only through its public API."""
