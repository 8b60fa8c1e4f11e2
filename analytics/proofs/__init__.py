"""proofs: what a sealed version proves and how it leaves the database.

Consistency proofs between versions, re-verification, signed summary exports and
retention archives. May import ``kernels``, ``seal``, ``tpmledger.storage`` and
``tpmledger.provenance``.
"""
