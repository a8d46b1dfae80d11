"""Integrity: every check that a candidate did the work honestly, and the one registry of their findings.

- registry.py: every finding name with its default severity and message; findings are built there.
- static.py: checks of the candidate's source, before anything runs (the app runs them too).
- runtime.py: checks inside the worker around the kernels, the timed calls and the sizes.
- outputs.py: checks of the candidate's outputs against new values in the same memory.
- evidence.py: findings from what the worker's pipeline recorded (inputs changed, kernels run, host vs
  event time, the harness's functions, threads left running).

Nothing is re-exported here: importing the static checks does not load the worker's ones.
"""
