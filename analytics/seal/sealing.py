"""Sealed snapshots (docs/provenance.md): immutable, versioned per run, each linked to the previous
seal.

Document = ``{run_id, version, computed_at, generator {name, version}, params,
events {sha256, count, format}, minutes {merkle_root, tree_size, through_minute_utc},
metrics_sha256, previous_seal}`` (plus ``rebased`` when late data changed minutes an
earlier version sealed: :mod:`analytics.seal.minute_log`) and ``seal`` = SHA-256 of its JCS.
The run object (the API's names plus extra keys), the minute table and the minute leaves
(:mod:`analytics.seal.stored_leaves`, what entry bundles serve) are stored with it.
A **checkpoint** (``end_before_ns``) seals the minutes that are closed while the run is
still receiving data (docs/provenance.md#versions).

Sealing is skipped when nothing changed: the newest snapshot already has the same
``events_sha256``, ``metrics_sha256`` and ``params`` (re-running ``analyze`` or a
worker poll after a duplicate export makes no new version). ``force=True`` seals anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import polars as pl
import rfc8785
from sqlalchemy.orm import Session

from tpmledger import __version__
from tpmledger.analytics.kernels.concurrency import SAG_FRACTION_OF_CAP, SAG_PASS_SHARE
from tpmledger.analytics.kernels.event_plans import QUANTILE_METHOD
from tpmledger.analytics.kernels.minute_table import SIGNIFICANT_DIGITS, with_minute_utc
from tpmledger.analytics.seal.minute_log import MINUTE, changed_minutes, first_minute, leaf_list
from tpmledger.analytics.seal.run_computation import (
    Progress,
    RunComputation,
    SealView,
    StageTimer,
    compute_in_view,
    seal_view,
)
from tpmledger.analytics.seal.sealed_figures import SealedFigures, store_sealed_figures
from tpmledger.analytics.seal.sealed_figures_stream import SealedFiguresStream, read_figure_inputs
from tpmledger.analytics.seal.stored_leaves import store_version_leaves
from tpmledger.provenance.event_file import EVENTS_FORMAT
from tpmledger.slo import Slo
from tpmledger.storage.codecs.time_text import minute_text, minute_text_ns, utc_ms
from tpmledger.storage.readers.live_read import run_state
from tpmledger.storage.readers.target_minutes import SEALED_TARGETS_KEY, encode_target_minutes
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.server.database import in_one_snapshot, transaction
from tpmledger.storage.writers.live_store import drop_sealed_live_rows
from tpmledger.storage.writers.retention_store import refuse_if_archived
from tpmledger.storage.writers.snapshot_store import (
    insert_snapshot,
    late_attempts_by_minute,
    latest_version,
    lock_run_for_sealing,
)

GENERATOR = {"name": "tpmledger", "version": __version__}

# How the figures were computed; part of the sealed document (docs/metrics.md).
PARAMS: dict[str, Any] = {
    "minute_bucket": "utc_minute_of_end_time",
    "rollups": "excluded",
    "percentile_interpolation": QUANTILE_METHOD,
    "ttft_variance": "population",
    "concurrency_sampling": "whole_second_instants",
    "sag_below_fraction_of_cap": SAG_FRACTION_OF_CAP,
    "sag_pass_share": SAG_PASS_SHARE,
    "float_significant_digits": SIGNIFICANT_DIGITS,
}


@dataclass(frozen=True)
class SealResult:
    """The run's newest snapshot after sealing, and whether this call created it."""

    run_id: str
    version: int
    seal: str
    created: bool
    metrics: dict[str, Any]
    document: dict[str, Any]
    final: bool = True  # False: sealed while the run was still receiving data
    # The run's updated_at in the snapshot this call read: every span stored by then is
    # in the version (a prune deletes only those: analytics/proofs/run_archive.py).
    data_as_of: datetime | None = None


def seal_of(document: dict[str, Any]) -> str:
    """The seal: SHA-256 of the document's JCS."""
    return hashlib.sha256(rfc8785.dumps(document)).hexdigest()


def through_minute(computation: RunComputation) -> str | None:
    """``through_minute_utc``: the last minute the version's tree holds (None: no minute)."""
    leaves = computation.tree.leaves
    return str(leaves[-1]["minute_utc"]) if leaves else None


def snapshot_document(
    computation: RunComputation,
    version: int,
    previous_seal: str | None,
    computed_at: datetime,
    params: dict[str, Any] | None = None,
    rebased: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The snapshot document for ``computation`` at ``version`` (docs/provenance.md)."""
    document: dict[str, Any] = {
        "run_id": computation.run_id,
        "version": version,
        "computed_at": utc_ms(computed_at),
        "generator": dict(GENERATOR),
        "params": dict(params or PARAMS),
        "events": {
            "sha256": computation.file.sha256,
            "count": computation.file.count,
            "format": EVENTS_FORMAT,
        },
        "minutes": {
            "merkle_root": computation.tree.root,
            "tree_size": computation.tree.tree_size,
            "through_minute_utc": through_minute(computation),
        },
        "metrics_sha256": computation.metrics_sha256,
        "previous_seal": previous_seal,
    }
    if rebased is not None:
        document["rebased"] = rebased
    return document


@dataclass(frozen=True)
class Rebase:
    """How late data changed the minutes of the version before: the document's ``rebased``
    and the late attempts per minute (stored beside the version, shown on the run page)."""

    rebased: dict[str, Any]
    late_minutes: list[dict[str, Any]]

    @property
    def stored(self) -> dict[str, Any]:
        """What the version's diagnostics keep of it (``late_attempts``)."""
        return {"from_version": self.rebased["from_version"], "minutes": self.late_minutes}


def rebase_of(session: Session, latest: Snapshot, computation: RunComputation) -> Rebase | None:
    """The rebase of the version after ``latest``, or None when it extends ``latest``."""
    if latest.leaf_hashes is None:
        return None  # sealed before leaf hashes were kept: nothing to compare with
    old_first = first_minute(latest.metrics)
    changed = changed_minutes(
        leaf_list(latest.leaf_hashes),
        old_first,
        computation.tree.leaf_hashes,
        first_minute(computation.metrics),
    )
    if not changed or old_first is None:
        return None
    old_end = old_first + latest.tree_size * MINUTE
    late = late_attempts_by_minute(
        session, computation.run_id, latest.data_as_of, int(old_end.timestamp()) * 1_000_000_000
    )
    rebased = {
        "from_version": latest.version,
        "minutes_changed": [minute_text(m) for m in changed],
        "late_attempts": sum(count for _, count in late),
    }
    by_minute = [{"minute_utc": minute_text_ns(m), "late_attempts": n} for m, n in late]
    return Rebase(rebased, by_minute)


def minute_records(minutes: pl.DataFrame, run_id: str, version: int) -> list[dict[str, Any]]:
    """minute_metrics rows (dicts) of a minute table with ``minute_ns``."""
    return list(iter_minute_records(minutes, run_id, version))


#: Minute rows made into dicts at a time while a seal stores them (a dict per row costs
#: ~1.5 KB: a table of 20 shards x 30 days, 900,000 rows, made whole was 1.3 GB).
RECORD_BATCH_ROWS = 20_000


def iter_minute_records(
    minutes: pl.DataFrame, run_id: str, version: int
) -> Iterator[dict[str, Any]]:
    """:func:`minute_records`, a batch of :data:`RECORD_BATCH_ROWS` rows at a time."""
    for part in minutes.iter_slices(RECORD_BATCH_ROWS):
        table = with_minute_utc(part).with_columns(
            run_id=pl.lit(run_id), version=pl.lit(version, dtype=pl.Int32)
        )
        yield from table.to_dicts()


def _kept(latest: Snapshot, data_as_of: datetime | None) -> SealResult:
    """The stored version ``latest`` as this call's result: nothing new was created."""
    return SealResult(
        latest.run_id,
        latest.version,
        latest.seal,
        False,
        latest.metrics,
        latest.document,
        latest.final,
        data_as_of,
    )


def _unchanged(latest: Snapshot, computation: RunComputation, final: bool) -> bool:
    # A provisional snapshot (sealed while the run was receiving data) is sealed again as
    # final once the run is quiet, even with the same figures.
    return (
        (latest.final or not final)
        and latest.events_sha256 == computation.file.sha256
        and latest.metrics_sha256 == computation.metrics_sha256
        and latest.document.get("params") == PARAMS
    )


def _minute_range(computation: RunComputation) -> tuple[datetime, datetime] | None:
    """First and last minute of the computation's minute table (None when empty)."""
    minutes = computation.analysis.minutes.get_column("minute_ns")
    if minutes.len() == 0:
        return None
    first, last = int(minutes.min()), int(minutes.max())  # type: ignore[arg-type]
    return (
        datetime.fromtimestamp(first // 1_000_000_000, UTC),
        datetime.fromtimestamp(last // 1_000_000_000, UTC),
    )


def compute_for_sealing(
    view: SealView,
    run_id: str,
    timer: StageTimer | None = None,
    end_before_ns: int | None = None,
    slo: Slo | None = None,
    progress: Progress | None = None,
) -> tuple[RunComputation, SealedFigures]:
    """The run's computation and the figures sealed beside it (diagnostics, minute
    outcomes, goodput under ``slo``), from one streaming read of the run; every input is
    read in ``view``'s one snapshot."""
    extras = SealedFiguresStream.from_inputs(*read_figure_inputs(view.session, run_id), slo)
    computation = compute_in_view(
        view, run_id, timer, end_before_ns, consumers=[extras], progress=progress
    )
    whole = computation.analysis.minutes.filter(pl.col("shard_id") == WHOLE_RUN).sort("minute_ns")
    figures = extras.finish(
        whole, computation.metrics.get("work_conserving"), computation.explicit_call_ids
    )
    sealed_targets = {SEALED_TARGETS_KEY: encode_target_minutes(computation.targets)}
    return computation, replace(figures, diagnostics={**figures.diagnostics, **sealed_targets})


def seal_computation(
    session: Session,
    computation: RunComputation,
    figures: SealedFigures,
    *,
    force: bool = False,
    now: datetime | None = None,
    final: bool = True,
) -> SealResult:
    """Store ``computation`` as the run's next version (or return the unchanged newest).

    ``final=False`` marks a snapshot sealed while the run was still receiving data: a
    sweep does not take it as the cap's final figures. Live minute rows the snapshot
    covers are deleted in the same transaction (docs/metrics.md#live-figures). ``figures``
    (diagnostics, minute outcomes, goodput: :func:`compute_for_sealing`) are stored with
    the version (and added to an unchanged newest version that lacks them). ``session``
    is a writing transaction (:func:`storage.server.database.transaction`), committed by
    its opener.
    """
    run_id = computation.run_id
    lock_run_for_sealing(session, run_id)
    version, previous_seal = latest_version(session, run_id)
    if version and not force:
        latest = session.get(Snapshot, (run_id, version))
        if latest is not None and latest.data_as_of > computation.facts.updated_at:
            # Another sealer (a worker replica) stored a version of newer data while
            # this one computed: an older computation never follows a newer version.
            return _kept(latest, latest.data_as_of)
        if latest is not None and _unchanged(latest, computation, final):
            drop_sealed_live_rows(
                session, run_id, computation.facts.updated_at, _minute_range(computation)
            )
            store_sealed_figures(session, run_id, version, figures)
            return _kept(latest, computation.facts.updated_at)
    computed_at = now or datetime.now(UTC)
    # The document carries milliseconds; store exactly what was sealed.
    computed_at = computed_at.replace(microsecond=computed_at.microsecond // 1000 * 1000)
    previous = session.get(Snapshot, (run_id, version)) if version else None
    rebase = rebase_of(session, previous, computation) if previous is not None else None
    document = snapshot_document(
        computation,
        version + 1,
        previous_seal,
        computed_at,
        rebased=rebase.rebased if rebase else None,
    )
    if rebase is not None:
        late = {**figures.diagnostics, "late_attempts": rebase.stored}
        figures = replace(figures, diagnostics=late)
    seal = seal_of(document)
    metrics = {**computation.metrics, "seal": seal, "snapshot_version": version + 1}
    row = {
        "run_id": run_id,
        "version": version + 1,
        "computed_at": computed_at,
        "seal": seal,
        "previous_seal": previous_seal,
        "events_sha256": computation.file.sha256,
        "events_count": computation.file.count,
        "merkle_root": computation.tree.root,
        "tree_size": computation.tree.tree_size,
        "metrics_sha256": document["metrics_sha256"],
        "document": document,
        "metrics": metrics,
        "data_as_of": computation.facts.updated_at,
        "final": final,
        "leaf_hashes": b"".join(computation.tree.leaf_hashes),
        "leaves_stored": True,
    }
    records = iter_minute_records(computation.analysis.minutes, run_id, version + 1)
    insert_snapshot(session, row, records)
    store_version_leaves(session, run_id, version + 1, computation.tree)
    store_sealed_figures(session, run_id, version + 1, figures)
    drop_sealed_live_rows(session, run_id, computation.facts.updated_at, _minute_range(computation))
    return SealResult(
        run_id, version + 1, seal, True, metrics, document, final, computation.facts.updated_at
    )


def seal_run(
    url: str,
    run_id: str,
    *,
    force: bool = False,
    timer: StageTimer | None = None,
    quiet_s: float | None = None,
    slo: Slo | None = None,
    end_before_ns: int | None = None,
    progress: Progress | None = None,
) -> SealResult:
    """Recompute ``run_id`` from the database and seal it as a new version if it changed.

    With ``quiet_s``, the snapshot is final only if the run received no data for that
    long before it was computed, counted from the end of any wait its newest attempts
    announced (Retry-After; ``tpmledger analyze`` of a running run is provisional).
    With ``end_before_ns``, a checkpoint over the attempts that ended before it (never
    final). ``progress`` is told the attempts read so far, after each chunk.

    Takes a URL: an entry point. Every input is read in one :class:`SealView`, closed
    before the version is stored in a transaction of its own.
    """
    with seal_view(url) as view:
        refuse_if_archived(view.session, run_id)  # its spans are gone: nothing to seal
        computation, figures = compute_for_sealing(
            view, run_id, timer, end_before_ns, slo, progress
        )
    final = end_before_ns is None
    if quiet_s is not None and final:
        quiet_for = datetime.now(UTC) - computation.facts.updated_at
        final = quiet_for.total_seconds() >= quiet_s + computation.facts.announced_wait_s
    if timer is None:
        with transaction(url) as session:
            return seal_computation(session, computation, figures, force=force, final=final)
    with timer.stage("store"), transaction(url) as session:
        return seal_computation(session, computation, figures, force=force, final=final)


def seal_unless_current(url: str, run_id: str) -> bool:
    """Seal ``run_id`` (:func:`seal_run`) unless its newest snapshot is final and no data
    arrived since; True when it sealed. Exports and archives call this first: a seal
    recomputes the whole run (hundreds of MB for millions of attempts), which a run sealed
    already does not need. Takes a URL: an entry point (exports, archives, the worker)."""
    if in_one_snapshot(url, seal_is_current, run_id):
        return False
    seal_run(url, run_id)
    return True


def seal_is_current(session: Session, run_id: str) -> bool:
    """True when ``run_id``'s newest snapshot is final and no data arrived since."""
    state = run_state(session, run_id)
    return state is not None and state.snapshot_version is not None and not state.is_live
