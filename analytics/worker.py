"""The analytics worker (``tpmledger serve analytics``): live minute table and reseals.

Two loops on two threads, so a long seal never delays live figures:

- the live loop, every ``settings.live_poll_s``, drains ingest's marks into the live minute
  table (:class:`analytics.live.live_updater.LiveUpdater`; docs/metrics.md#live-figures);
- the reseal loop, every ``settings.analytics_poll_s``, asks storage for runs whose
  ``runs.updated_at`` is newer than their latest snapshot's ``data_as_of`` and older than
  ``settings.reseal_quiet_s`` (the quiet period: a live run is sealed once it pauses, not
  on every batch), and seals each. A run whose figures turn out unchanged is remembered by
  its ``updated_at`` so it is not recomputed on every poll. The same loop seals
  checkpoints of runs still receiving data (:mod:`analytics.seal.checkpoints`).

Every seal (reseal, checkpoint, the daily prune's) runs in a child process
(:mod:`analytics.seal.seal_process`) while this one holds the run's sealing claim: a seal
of millions of attempts takes hundreds of MB, its own budget, and a long-running process
would keep much of it. The worker's own memory is the live path's
(docs/configuration.md#memory).

Every connection is bounded by its role (:func:`storage.server.database.role_url`): the live loop's
statements and lock waits by ``live``, seals and checkpoints by ``seal``, the prune by
``prune`` (docs/operations.md#bounded-queries), so no background query can run for an hour
or queue ingest's commits behind a lock it waits for.

SIGTERM/SIGINT stop both cleanly between updates and seals.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tpmledger import compiled_kernels
from tpmledger.analytics.live.ingest_yield import ingest_saturated, yield_to_ingest
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.live.warm_kernels import load_live_kernels
from tpmledger.analytics.seal.checkpoints import Checkpointer, child_detail
from tpmledger.analytics.seal.seal_process import SealFailed, seal_run_in_child
from tpmledger.durations import parse_age
from tpmledger.settings import Settings
from tpmledger.slo import Slo, optional_slo
from tpmledger.storage.readers.snapshots_read import runs_due_for_seal
from tpmledger.storage.server.database import in_one_snapshot, role_url
from tpmledger.storage.writers.snapshot_store import sealing_claim

if TYPE_CHECKING:
    from tpmledger.analytics.seal.sealing import SealResult

log = logging.getLogger("tpmledger.analytics")


class ResealLoop:
    """One polling loop over one database; :meth:`poll_once` is the unit tests drive.

    Each seal runs in a child process; ``in_process=True`` seals in this one instead
    (tests that seal many small runs; never the worker)."""

    def __init__(
        self, url: str, quiet_s: float, slo: Slo | None = None, *, in_process: bool = False
    ) -> None:
        """Takes a URL: a worker loop (an entry point) that opens a view per poll and
        launches the seal's child processes."""
        self.url = url
        self.quiet_s = quiet_s
        self.slo = slo  # goodput is stored under it with each version (TPMLEDGER_SLO)
        self.in_process = in_process
        # run_id -> updated_at already handled (sealed, unchanged, or failed)
        self.handled: dict[str, datetime] = {}

    def poll_once(self, stop: threading.Event | None = None) -> list[str]:
        """Seal every due run; returns the run ids that got a new version."""
        sealed: list[str] = []
        for run_id, updated_at in in_one_snapshot(self.url, runs_due_for_seal, self.quiet_s):
            if stop is not None and stop.is_set():
                break
            if self.handled.get(run_id) == updated_at:
                continue
            started = time.perf_counter()
            try:
                with sealing_claim(self.url, run_id) as claimed:
                    if not claimed:
                        continue  # a replica is sealing it; it is due again if that fails
                    self.handled[run_id] = updated_at
                    result, detail = self._seal(run_id)
            except SealFailed as exc:
                if exc.kind == "RunTooLong":
                    log.warning("not sealing: %s", exc.message)
                else:
                    log.error(
                        "sealing %s failed; will retry when it receives new data: %s", run_id, exc
                    )
                continue
            except Exception:  # one bad run must not stop the worker
                log.exception("sealing %s failed; will retry when it receives new data", run_id)
                continue
            took = time.perf_counter() - started
            if result.created:
                sealed.append(run_id)
                # Timings and stages only with -v (DEBUG): the default line says what happened.
                timed = log.isEnabledFor(logging.DEBUG)
                log.info(
                    "sealed %s v%d seal %s events %s%s",
                    run_id,
                    result.version,
                    result.seal,
                    result.metrics.get("attempts"),
                    f" in {took:.2f}s{detail}" if timed else "",
                )
            else:
                log.info(
                    "%s unchanged since v%d; not resealed%s",
                    run_id,
                    result.version,
                    detail if log.isEnabledFor(logging.DEBUG) else "",
                )
        return sealed

    def _seal(self, run_id: str) -> tuple[SealResult, str]:
        """The run's newest version after sealing it, and what to log of the seal."""
        if self.in_process:
            from tpmledger.analytics.kernels.run_span_limit import RunTooLong
            from tpmledger.analytics.seal.sealing import seal_run

            try:
                return seal_run(self.url, run_id, slo=self.slo), ""
            except RunTooLong as exc:
                raise SealFailed("RunTooLong", str(exc)) from exc
        child = seal_run_in_child(self.url, run_id, slo=self.slo)
        return child.result, child_detail(child)


def warm_in_child() -> None:
    """Compile every analytics kernel into the on-disk cache, or check that it is there,
    in a child process (``python -m tpmledger.analytics.seal.kernel_warmup``), so no seal
    waits for a compilation. The seals' children then load them from the cache, and so
    does the live path, one kernel at a time. This process never loads the kernels only a
    seal uses, such as the event-file writer's."""
    done = subprocess.run(
        [sys.executable, "-P", "-m", "tpmledger.analytics.seal.kernel_warmup"],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        said = done.stdout.strip() or "analytics kernels ready"
        if not log.isEnabledFor(logging.DEBUG):  # its time only with -v
            said = said.split(" in ")[0]
        log.info("%s (in a child process)", said)
    else:  # the seals compile what they miss, later
        log.warning("warming the analytics kernels failed (status %d)", done.returncode)


def _install_signal_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        log.info("analytics worker stopping (signal %d)", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def run(settings: Settings, stop: threading.Event | None = None) -> None:
    """Poll and reseal until SIGTERM/SIGINT (or ``stop`` is set)."""
    if not settings.database_url:
        raise ValueError("the analytics worker needs settings.database_url")
    stop = stop or threading.Event()
    _install_signal_handlers(stop)
    slo = optional_slo(settings.slo)
    seal_url = role_url(settings.database_url, "seal")
    loop = ResealLoop(seal_url, settings.reseal_quiet_s, slo)
    checkpoints = Checkpointer(
        seal_url,
        every_s=settings.checkpoint_every_s,
        quiet_s=settings.reseal_quiet_s,
        close_after_s=settings.minute_close_after_s,
        slo=slo,
    )
    # The live loop starts at once: until the child has compiled (or found in the cache)
    # every kernel, the live path uses their plain implementations, so a new run's
    # first live figures never wait for a compilation (docs/metrics.md#live-figures).
    compiled_kernels.compiling()
    live = threading.Thread(
        target=run_live_loop,
        args=(
            LiveUpdater(role_url(settings.database_url, "live")),
            settings.live_poll_s,
            stop,
            settings.live_max_lag_s,
        ),
        name="live-minutes",
        daemon=True,
    )
    live.start()
    try:
        warm_in_child()
    finally:
        compiled_kernels.ready()
    log.info(
        "analytics worker polling every %.1fs (quiet period %.1fs), live table every %.1fs",
        settings.analytics_poll_s,
        settings.reseal_quiet_s,
        settings.live_poll_s,
    )
    retention = RetentionSchedule(settings)
    while not stop.is_set():
        try:
            retention.run_if_due()
            loop.poll_once(stop)
            if settings.checkpoint_every_s > 0 and not stop.is_set():
                checkpoints.poll_once()
        except Exception:  # database restarts must not kill the worker
            log.exception("analytics poll failed; retrying")
        stop.wait(settings.analytics_poll_s)
    live.join(timeout=30)
    log.info("analytics worker stopped")


class RetentionSchedule:
    """With ``TPMLEDGER_RETENTION`` set, prune once a day (first a minute after start):
    archive runs older than it and delete their raw spans (analytics/proofs/run_archive.py)."""

    PERIOD_S = 86_400.0
    RETRY_S = 3_600.0

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.next_at = time.monotonic() + 60.0

    def run_if_due(self) -> None:
        settings = self.settings
        if settings.retention is None or time.monotonic() < self.next_at:
            return
        from tpmledger.analytics.proofs.run_archive import prune
        from tpmledger.provenance.signing_keys import load_or_create_signing_key

        assert settings.database_url is not None
        # A prune that could not run at all (database restarting) is tried again within
        # the hour; runs it kept (spans still arriving, a bad run) wait for the next day.
        self.next_at = time.monotonic() + self.RETRY_S
        report = prune(
            role_url(settings.database_url, "prune"),
            parse_age(settings.retention),
            settings.archive_dir or settings.data_dir / "archive",
            load_or_create_signing_key(settings),
            say=log.info,
            log_origin=settings.checkpoint_origin,
            wait=False,
        )
        if report.busy:  # another prune (manual, or a replica's) holds the lock
            log.info("retention: another prune is running; tried again within the hour")
            return
        self.next_at = time.monotonic() + self.PERIOD_S
        kept = [run for run in report.runs if run.action.startswith("kept")]
        for run in kept:
            log.warning("retention: run %r %s", run.run_id, run.action)
        log.info(
            "retention %s: %d run(s) archived, %d kept",
            settings.retention,
            len(report.runs) - len(kept),
            len(kept),
        )


def warm_live_imports() -> None:
    """Import what the live path would import on its first update (Arrow's compute
    functions, which Polars loads on the first Arrow column: seconds on a busy machine),
    before any run's data arrives."""
    started = time.perf_counter()
    import pyarrow.compute  # noqa: F401

    log.debug("live path imports loaded in %.1fs", time.perf_counter() - started)


# After updates that used C seconds of CPU, the worker's and (when PostgreSQL runs on this
# machine) their database backend's, the live loop waits min(C, this) before the next
# (docs/metrics.md#live-figures): live work takes at most about half of a core and the
# commits meanwhile are coalesced into one update; the live rows' ``data_as_of`` says
# which commit they reflect. CPU, not wall time: on a loaded machine an update's wall time
# is mostly waiting for a core or for PostgreSQL, and waiting that long again only delayed
# the next figure (issue 37). The backend's CPU counts too: most of an update's work is its
# statements (a backfill's update: 0.16 s here, 0.3-0.5 s there), and counting only this
# process kept the live path busy ~85 % of a burst (issue 39). Then, while ingest's writer
# commits back to back, the loop waits longer (analytics/live/ingest_yield.py).
LIVE_YIELD_MAX_S = 1.0


def run_live_loop(
    updater: LiveUpdater, poll_s: float, stop: threading.Event, max_lag_s: float = 0.0
) -> None:
    """Drain new data into the live minute table until ``stop`` is set.

    After updates that found work it waits as long as they used the CPU, here and in
    their database backend when it runs on this machine (at most
    :data:`LIVE_YIELD_MAX_S`), then, while ingest's writer is saturated, until
    ``max_lag_s`` after the update began: each update drains every commit queued
    meanwhile, so a burst is folded in a few updates and live work yields to ingest instead
    of competing with every commit. When idle it waits ``poll_s``; the first time it is
    idle with the kernels compiled, it loads them into this process first
    (analytics/live/warm_kernels.py), so a burst's first update does not.
    """
    warm_live_imports()
    kernels_loaded = False
    while not stop.is_set():
        began = time.monotonic()
        try:
            updates = updater.update_once()
        except Exception:  # database restarts must not kill the worker
            log.exception("live update failed; retrying")
            updates = []
        for update in updates:
            # Timings only with -v (DEBUG), like every other timing line of the services.
            log.debug(
                "live %s: %d minutes, %d attempts read, %.3fs (%s), cpu %.3fs, backend %.3fs",
                update.run_id,
                update.minutes,
                update.attempts_read,
                update.wall_s,
                ", ".join(f"{name} {s:.2f}s" for name, s in update.stages.items()),
                update.cpu_s,
                update.backend_cpu_s,
            )
        if updates:
            used = sum(update.cpu_s + update.backend_cpu_s for update in updates)
            stop.wait(min(used, LIVE_YIELD_MAX_S))
            waited = yield_to_ingest(
                lambda: ingest_saturated(updater.connection(), stop), stop, began, max_lag_s
            )
            if waited >= 0.5:
                log.debug("live updates deferred %.1fs: ingest's writer is saturated", waited)
        else:
            if not kernels_loaded and compiled_kernels.kernels_ready():
                # Idle, with the kernels in the cache: load them here now, not in the
                # first update of a burst (analytics/live/warm_kernels.py).
                kernels_loaded = True
                _load_live_kernels()
            stop.wait(poll_s)


def _load_live_kernels() -> None:
    try:
        cpu_s = load_live_kernels()
    except Exception:  # the first update loads them instead
        log.exception("loading the live path's kernels failed")
        return
    log.debug("live path kernels loaded (%.2f CPU-s)", cpu_s)
