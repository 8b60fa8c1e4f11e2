"""seal: a run's sealed versions (docs/provenance.md#streaming-seal).

The streaming walk that reads a run one chunk of whole minutes at a time inside one
snapshot, folds the figures, writes and hashes ``events.jsonl``, builds the minute tree
and stores the version (with the minutes it changed); checkpoints of live runs; the same
walk over events in memory (``memory_run``) and the kernel warm-up. May
import ``kernels``, ``verdicts`` (the figures sealed beside a version),
``tpmledger.storage`` and ``tpmledger.provenance``.
"""
