"""Modal screens: help, settings, and the quit confirmation."""
