"""Textual workbench (cudaforge-tui); talks to the engine only through its public API."""

import os

# Up to 120 frames a second instead of Textual's 60: a key press that changes a pane settles over two or
# three frames, and each waits for the frame timer, so this takes ~15-20 ms off a pane switch (measured
# in Pilot, bench/RESULTS.md). Read by Textual when it is first imported; a user's own TEXTUAL_FPS wins.
os.environ.setdefault("TEXTUAL_FPS", "120")
