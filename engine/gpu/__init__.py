"""The GPU as a shared resource: spec sheets (specs), the cross-process lock (lock) and the order of
turns at it (turns)."""
