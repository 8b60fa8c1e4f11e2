"""dashboard shows throughput versus stability from sealed snapshots (Dash, port 8050)."""
