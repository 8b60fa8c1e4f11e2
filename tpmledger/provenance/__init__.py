"""provenance: the canonical event file, the minute Merkle tree, signed run summaries."""
