"""Checkpoints: while a run is receiving data, seal its closed minutes every so often.

A minute is closed ``TPMLEDGER_MINUTE_CLOSE_AFTER_S`` after it ends
(docs/metrics.md#live-figures). Every ``TPMLEDGER_CHECKPOINT_EVERY_S`` (default 300 s) a
run that is still receiving data gets a version over the attempts that ended in its closed
minutes, so a figure published during the run can later be proven a prefix of the final
summary (docs/provenance.md#versions). The first comes that long after the run's first
commit: a backfill's minutes are all closed at once, and sealing them while its commits
still arrive would compete with ingest for a version the rest of the backfill rebases. Once
the run is quiet, the reseal loop seals every minute as before. A checkpoint costs a seal
of the run's closed minutes, which runs in a child process
(:func:`~tpmledger.analytics.seal.seal_process.seal_run_in_child`): its memory is the
seal's budget, never the worker's (docs/configuration.md#memory).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tpmledger.analytics.seal.minute_log import MINUTE
from tpmledger.analytics.seal.seal_process import ChildSeal, SealFailed, seal_run_in_child
from tpmledger.slo import Slo
from tpmledger.storage.readers.snapshots_read import runs_due_for_checkpoint
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.snapshot_store import sealing_claim

if TYPE_CHECKING:
    from tpmledger.analytics.seal.sealing import SealResult

log = logging.getLogger("tpmledger.analytics")
_NS = 1_000_000_000


def closed_before(now: datetime, close_after_s: float) -> datetime:
    """The start of the earliest minute still open at ``now``: every minute before it is
    closed (it ended at least ``close_after_s`` ago)."""
    limit = now.timestamp() - close_after_s
    return datetime.fromtimestamp(limit // 60 * 60, UTC)


@dataclass
class Checkpointer:
    """Seals due checkpoints; :meth:`poll_once` is what the worker (and tests) call.

    Each seal runs in a child process; ``in_process=True`` seals in this one instead
    (tests that seal many small runs; never the worker)."""

    url: str
    every_s: float
    quiet_s: float
    close_after_s: float
    slo: Slo | None = None
    in_process: bool = False

    def poll_once(self, now: datetime | None = None) -> list[SealResult]:
        """Seal a checkpoint of every run that is due and has newly closed minutes."""
        cutoff = closed_before(now or datetime.now(UTC), self.close_after_s)
        cutoff_ns = int(cutoff.timestamp()) * _NS
        sealed = []
        for run_id, first_event_ns, through in in_one_snapshot(
            self.url, runs_due_for_checkpoint, self.every_s, self.quiet_s
        ):
            if first_event_ns >= cutoff_ns:
                continue  # no minute of it has closed yet
            if through is not None and _minute(through) + MINUTE >= cutoff:
                continue  # its newest version already covers every closed minute
            try:
                with sealing_claim(self.url, run_id) as claimed:
                    if not claimed:
                        continue  # a worker replica is sealing it right now
                    result, detail = self._seal(run_id, cutoff_ns)
            except SealFailed as exc:
                if exc.kind == "RunTooLong":
                    log.warning("no checkpoint: %s", exc.message)
                else:
                    log.error("checkpoint of %s failed: %s", run_id, exc)
                continue
            except Exception:  # one bad run must not stop the others' checkpoints
                log.exception("checkpoint of %s failed", run_id)
                continue
            if result.created:
                sealed.append(result)
                log.info(
                    "checkpoint %s v%d through %s%s",
                    run_id,
                    result.version,
                    _through(result),
                    detail if log.isEnabledFor(logging.DEBUG) else "",  # timings: -v only
                )
        return sealed

    def _seal(self, run_id: str, cutoff_ns: int) -> tuple[SealResult, str]:
        """The checkpoint's version, and what to log of the seal (attempts, stages, the
        child's peak memory)."""
        if self.in_process:
            from tpmledger.analytics.kernels.run_span_limit import RunTooLong
            from tpmledger.analytics.seal.sealing import seal_run

            try:
                result = seal_run(self.url, run_id, end_before_ns=cutoff_ns, slo=self.slo)
            except RunTooLong as exc:
                raise SealFailed("RunTooLong", str(exc)) from exc
            return result, ""
        child = seal_run_in_child(self.url, run_id, end_before_ns=cutoff_ns, slo=self.slo)
        return child.result, child_detail(child)


def child_detail(child: ChildSeal) -> str:
    """``, 1,234,567 attempts, child peak 612 MiB (read 1.20s, …)`` for a log line."""
    attempts = child.result.metrics.get("attempts")
    peak = child.peak_rss_bytes
    stages = ", ".join(f"{name} {s:.2f}s" for name, s in child.stages.items())
    return (
        (f", {attempts:,} attempts" if isinstance(attempts, int) else "")
        + (f", child peak {peak / 2**20:,.0f} MiB" if peak is not None else "")
        + (f" ({stages})" if stages else "")
    )


def _minute(text_value: str) -> datetime:
    return datetime.fromisoformat(text_value.replace("Z", "+00:00"))


def _through(result: SealResult) -> str | None:
    return result.document.get("minutes", {}).get("through_minute_utc")
