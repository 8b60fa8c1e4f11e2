"""Read-only queries the pages use: runs, latest snapshots, minute rows, sweeps
(docs/dashboard.md)."""
