"""storage/readers: Every read the other layers make: run listings, live windows, seal reads,
sealed minutes, targets, /metrics series.
"""
