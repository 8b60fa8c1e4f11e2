"""tpmledger: observability and provenance for LLM token throughput across sharded fleets."""

from __future__ import annotations

from typing import Any

GENERATOR_NAME = "tpmledger"


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed metadata on first use: importing
    ``importlib.metadata`` costs every ``tpmledger`` command (``--help`` too) a noticeable
    part of its start otherwise."""
    if name != "__version__":
        raise AttributeError(f"module 'tpmledger' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("tpmledger")
    except PackageNotFoundError:  # running from a source tree that was not installed
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found
