"""views: a run's figures as readers see them, sealed where nothing changed, live elsewhere.

Light on purpose: the read API imports these in the ingest process, so nothing here loads
Polars or the compiled kernels at import time. May import ``tpmledger.storage`` and the
light rules of ``kernels`` (``figure_rules``, ``run_span_limit``).
"""
