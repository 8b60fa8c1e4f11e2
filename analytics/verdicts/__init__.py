"""verdicts: what the figures mean for a decision (docs/metrics.md).

Comparing two runs, the cap sweep and its knee, the cap-selection diagnostics, goodput
against SLOs and per-minute outcomes. May import ``kernels``, ``views`` (the current
figures a sweep compares), ``tpmledger.storage`` and ``tpmledger.provenance``.
"""
