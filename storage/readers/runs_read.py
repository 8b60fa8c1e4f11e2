"""The read side's unknown-run error (times as text: :mod:`storage.codecs.time_text`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from tpmledger.storage.schema.models import Run


class UnknownRun(LookupError):
    """The run has no ``runs`` row (nothing was ever stored for it)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no such run: {run_id!r} (no spans were stored for it)")
        self.run_id = run_id


def run_is_known(session: Session, run_id: str) -> bool:
    """True when the run has a ``runs`` row (spans were stored for it once)."""
    return session.get(Run, run_id) is not None
