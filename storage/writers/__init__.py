"""storage/writers: Every write: the COPY bulk path, live marks and rows, snapshots, versions,
leaves, retention, tokens, metrics.
"""
