"""The read side's unknown-run error (times as text: :mod:`storage.time_text`)."""

from __future__ import annotations


class UnknownRun(LookupError):
    """The run has no ``runs`` row (nothing was ever stored for it)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: no spans were stored for it")
        self.run_id = run_id
