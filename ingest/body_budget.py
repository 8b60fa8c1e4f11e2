"""A bound on request bodies held in memory, from admission until the answer.

The group-commit queue bounds the *rows* waiting to be written, but a request holds its
body from the moment its headers arrive until its answer is sent: with hundreds of
concurrent senders those bodies, not the queue, decide the memory of the process
(measured with ``bench/ingest_overload.py``: 480 senders of 512-span batches took ingest
to 450-660 MiB with the queue far from full). The target is RSS ≤ 300 MB under overload,
and overload is a 503 with Retry-After (docs/ingest.md#answers).

What is charged is what is held: a body's **decompressed** bytes, as they grow. A
request is admitted with one socket read's worth (:data:`FIRST_CHARGE`, or its declared
length when that is smaller) and its charge grows with every decompressed piece
(:meth:`BodyCharge.grow_to`); a request that would take the bodies in flight past the
budget is refused with 503 before or while its body is read. A declared length is never
charged ahead of the bytes (issue 41: a client declaring 16 MiB and sending nothing took
the whole budget, and every other export got 503 for as long as it stalled); a stalled
body is cut off by the listener's read deadlines, which release its charge. A gzip body
of 61 KB that inflates to 60 MiB is charged 60 MiB, not 61 KB (docs/ingest.md#limits).

The budget also bounds one body: a body that alone inflates past it is refused with 413.
Holding one body costs about 2.5-4 × its size across the listener and a normalizer
worker (the hand-over copies it), and an idle ingest is ~205 MiB: one 60 MiB body alone
took ingest to 490 MiB, one 16 MiB body to 242 MiB (bench/results/ingest_overload.txt).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from tpmledger.ingest.error_taxonomy import Overloaded, PayloadTooLarge

# 16 MiB ≈ 55 requests of 512 spans (~28k spans, over a second of work at full speed):
# plenty for steady load, and each admitted request also holds its COPY block (~1.8 × a
# protobuf body: 273 KB of 512 bench spans → 482 KB) until the commit, so this bound is
# what keeps overload under 300 MB.
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024
# A body without Content-Length (chunked) is admitted with this much (one socket read);
# its charge then grows with the bytes actually held.
FIRST_CHARGE: Final = 64 * 1024


class BodyCharge:
    """One request's share of the budget; grows with the decompressed body it holds."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.charged = 0

    def grow_to(self, held_bytes: int, what: str = "decompressed body") -> None:
        """Charge ``held_bytes`` in all, or refuse: 413 when one body alone is larger than
        the whole budget (it could never be held), 503 when the bodies in flight would
        pass the budget (retry later). ``what`` names the charge in the 413 message."""
        extra = held_bytes - self.charged
        if extra <= 0:
            return
        budget = self._budget
        if held_bytes > budget.max_bytes:
            raise PayloadTooLarge(
                f"{what} over {budget.max_bytes} bytes, the in-flight body "
                "budget (TPMLEDGER_BODY_BUDGET_BYTES): send smaller batches"
            )
        if budget.in_use + extra > budget.max_bytes:
            raise Overloaded(
                f"{budget.in_use} bytes of request bodies in flight; retry later",
                retry_after_s=budget.retry_after_s,
            )
        budget.in_use += extra
        self.charged = held_bytes


class BodyBudget:
    """Decompressed bytes of request bodies currently held; refuses past ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, *, retry_after_s: int = 2) -> None:
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self.in_use = 0

    @contextmanager
    def hold(self, content_length: str | None) -> Iterator[BodyCharge]:
        """Admit one body for the duration of the block, or raise :class:`Overloaded`.

        It is charged :data:`FIRST_CHARGE` (its declared length when smaller) at once; the
        block grows the charge to the bytes it holds through the yielded charge. Raises
        :class:`PayloadTooLarge` when the declared length alone is over the budget.
        """
        declared = int(content_length) if content_length and content_length.isdigit() else 0
        if declared > self.max_bytes:
            raise PayloadTooLarge(
                f"declared body of {declared} bytes is over {self.max_bytes} bytes, the "
                "in-flight body budget (TPMLEDGER_BODY_BUDGET_BYTES): send smaller batches"
            )
        charge = BodyCharge(self)
        charge.grow_to(min(declared, FIRST_CHARGE) if declared else FIRST_CHARGE)
        try:
            yield charge
        finally:
            self.in_use -= charge.charged
