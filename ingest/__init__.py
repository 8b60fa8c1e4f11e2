"""ingest receives OTLP spans (HTTP 4318, gRPC 4317) and hands them to storage."""
