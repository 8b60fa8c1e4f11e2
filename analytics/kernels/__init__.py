"""kernels: the arithmetic of every figure, over canonical events held in memory.

Compiled group loops, percentiles, concurrency seconds, logical calls, rollups, the
per-cell figures, the minute table's columns, slot time held by tools, how the
diagnostics are computed, and the run object's assembly
(:func:`run_figures.run_figures_of`); the seal's walk (``seal/run_stream.py``) is what
composes them into a run's table and figures. Pure functions of their inputs: no
database, no sessions, no files. May import ``tpmledger.provenance`` (the event schema)
and ``tpmledger.storage.codecs.binary_copy`` for the compiled row codec; nothing else of analytics.
"""
