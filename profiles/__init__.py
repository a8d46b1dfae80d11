"""Data: GPU profiles, LLM model profiles and the default cudaforge.toml."""
