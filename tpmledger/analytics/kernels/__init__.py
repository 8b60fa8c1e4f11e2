"""kernels: the arithmetic of every figure, over canonical events held in memory.

Compiled group loops, percentiles, concurrency seconds, logical calls, rollups, the
per-cell figures and the whole-run minute table. Pure functions of their inputs: no
database, no sessions, no files. May import ``tpmledger.provenance`` (the event schema)
and ``tpmledger.storage.binary_copy`` for the compiled row codec; nothing else of analytics.
"""
