"""analytics computes minute-bucket TPM, stability and concurrency figures and seals snapshots.

Rooms, by role (each one's docstring says what it may import):

- ``kernels``: the arithmetic of every figure over events in memory;
- ``live``: the live minute table, kept current while a run receives data;
- ``views``: a run's figures as readers see them;
- ``seal``: the streaming walk that seals versions and checkpoints;
- ``proofs``: minute trees, consistency, verification, exports and archives;
- ``verdicts``: compare, cap sweep, diagnostics, goodput;
- ``worker``: the service that runs ``live`` and ``seal`` (``tpmledger serve analytics``).

Nothing here imports ``tpmledger.cli``.
"""
