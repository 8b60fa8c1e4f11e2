"""simulator: a shard fleet and a finite-capacity LLM server, for demos, tests and benchmarks."""
