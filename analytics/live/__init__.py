"""live: the live minute table, kept current from ingest's marks while a run receives data.

May import ``kernels``, ``tpmledger.storage`` and ``tpmledger.provenance``.
"""
