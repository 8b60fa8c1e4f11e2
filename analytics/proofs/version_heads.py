"""What a published version's head is, and why a version cannot be published: light on
purpose (no Polars, no kernels), so serving checkpoints and tiles from the ingest process
loads nothing heavy (docs/provenance.md#checkpoints)."""

from __future__ import annotations

import shlex
from datetime import datetime

from tpmledger.provenance.checkpoint import (
    Checkpoint,
    default_log_origin,
    run_origin,
    sign_checkpoint,
)
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.storage.schema.models import Snapshot


class RunNotSealed(LookupError):
    """The run has no sealed snapshot yet (``known=False``: nothing was ever stored for it,
    and the message says so instead of asking to seal it)."""

    def __init__(self, run_id: str, *, known: bool = True) -> None:
        if not known:
            super().__init__(f"no such run: {run_id!r} (no spans were stored for it)")
        else:
            super().__init__(
                f"run {run_id!r} has no sealed snapshot; seal it with "
                f"`tpmledger analyze {shlex.quote(run_id)}` (or wait for the analytics worker)"
            )
        self.known = known


class VersionNotSealed(LookupError):
    """The run has no sealed version of that number."""

    def __init__(self, run_id: str, version: int) -> None:
        super().__init__(f"run {run_id!r} has no sealed version {version}")


class SnapshotOutdated(RuntimeError):
    """The stored events no longer hash to what the newest snapshot sealed."""


def version_end_ns(snapshot: Snapshot) -> int | None:
    """The end of the version's last minute (None for versions sealed before it was
    recorded: they covered every attempt they saw)."""
    through = (snapshot.document or {}).get("minutes", {}).get("through_minute_utc")
    if not through:
        return None
    moment = datetime.fromisoformat(str(through).replace("Z", "+00:00"))
    return (int(moment.timestamp()) + 60) * 1_000_000_000


def head_checkpoint(
    run_id: str, tree_size: int, merkle_root: str, key: SigningKey, log_origin: str | None = None
) -> str:
    """A tree head (hex root) as a signed checkpoint of the run's log."""
    origin = run_origin(log_origin or default_log_origin(), run_id)
    checkpoint = Checkpoint(origin, tree_size, bytes.fromhex(merkle_root))
    return sign_checkpoint(checkpoint, key.private_key)
