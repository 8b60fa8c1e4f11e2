"""analytics computes minute-bucket TPM, stability and concurrency figures and seals snapshots."""
