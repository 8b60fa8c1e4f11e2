"""tpmledger: observability and provenance for LLM token throughput across sharded fleets."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tpmledger")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

GENERATOR_NAME = "tpmledger"
