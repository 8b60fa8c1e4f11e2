"""Build, sign and write a run summary from the run's newest sealed snapshot (docs/provenance.md).

The application layer's composition of the leaf library :mod:`provenance` (event file,
minute proofs, statement, DSSE, Sigstore bundle) with the database (:mod:`storage`) and
the minute leaves of :mod:`analytics`.

The predicate's figures are the snapshot's (``snapshots.metrics``, docs/metrics.md names); the
event file and minute leaves are rebuilt from the database and must hash to what the
snapshot sealed, so the export never signs figures that its ``events.jsonl`` contradicts.
Export directory: ``events.jsonl``, ``summary.dsse.json``, ``summary.sigstore.json``,
``service.pub``, ``minute-proofs.json``, ``SUMMARY.txt``, ``checkpoint`` (the version's
minute tree head as a C2SP signed note, docs/provenance.md#checkpoints) and, with
``tiles=True``, the tree as C2SP tiles under ``tile/`` (docs/provenance.md#tiles).
"""

from __future__ import annotations

import gzip
import json
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from sqlalchemy import select
from sqlalchemy.orm import Session

from tpmledger import __version__
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.proofs.run_events import RunEventFile
from tpmledger.analytics.proofs.version_heads import (
    RunNotSealed,
    SnapshotOutdated,
    VersionNotSealed,
    head_checkpoint,
    version_end_ns,
)
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.minute_leaves import leaves_from_minutes
from tpmledger.analytics.seal.run_computation import SealView
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.provenance.dsse import sign_envelope
from tpmledger.provenance.event_file import FileDigests, build_event_file
from tpmledger.provenance.in_toto_statement import (
    build_predicate,
    build_statement,
    statement_payload,
)
from tpmledger.provenance.minute_proofs import LEAF_FIGURES, build_minute_proofs, leaf_bytes
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.sigstore_bundle import bundle_from_envelope
from tpmledger.provenance.summary_text import summary_text
from tpmledger.provenance.tiles import tree_tile_files
from tpmledger.storage.codecs.time_text import minute_text_ns, utc_ms
from tpmledger.storage.readers.runs_read import run_is_known
from tpmledger.storage.readers.snapshots_read import busy_minute_rows, snapshot_at
from tpmledger.storage.schema.models import Snapshot

EXPORT_FILES = (
    "events.jsonl",
    "summary.dsse.json",
    "summary.sigstore.json",
    "service.pub",
    "minute-proofs.json",
    "SUMMARY.txt",
    "checkpoint",
)


@dataclass(frozen=True)
class RunSummary:
    """Everything an export writes except, for a stored run, the event file (streamed)."""

    run_id: str
    seal: str
    events: bytes | None  # None: the event file was streamed (build_summary's events_to)
    predicate: dict[str, Any]
    envelope: dict[str, Any]
    bundle: dict[str, Any]
    minute_proofs: dict[str, Any]
    public_pem: str
    key_fingerprint: str
    checkpoint: str

    @property
    def text(self) -> str:
        return summary_text(self.predicate, self.key_fingerprint)


def snapshot_predicate(session: Session, run_id: str) -> dict[str, Any]:
    """The predicate a summary of the run's newest snapshot signs (no events read)."""
    snapshot = _latest_snapshot(session, run_id)
    if snapshot is None:
        raise RunNotSealed(run_id)
    return _predicate(snapshot)


def summary_envelope(session: Session, run_id: str, key: SigningKey) -> dict[str, Any]:
    """The signed envelope over the run's newest snapshot (reads the snapshot row only)."""
    snapshot = _latest_snapshot(session, run_id)
    if snapshot is None:
        raise RunNotSealed(run_id)
    return _sign(_predicate(snapshot), key)


def build_summary(
    view: SealView,
    run_id: str,
    key: SigningKey,
    version: int | None = None,
    *,
    log_origin: str | None = None,
    events_to: Path | None = None,
    compress_events: bool = False,
) -> RunSummary:
    """Sign a summary of the run's newest snapshot (or of ``version``) with ``key``, with
    its minute proofs; the canonical event file streams to ``events_to`` (gzip when
    ``compress_events``), or is only hashed when it is None.

    The file is written a range of minutes at a time (:class:`RunEventFile`), so memory
    follows a chunk, not the run; the leaves are the version's sealed minute figures with
    the streamed file's minute digests (an empty minute's leaf is a constant of its
    minute), and every proof comes from one pass over the tree. The events of an earlier
    version are those it saw: attempts stored by its ``data_as_of`` that ended by the end
    of its last minute (a checkpoint covers closed minutes only). Raises
    :class:`SnapshotOutdated` when the stored events no longer hash to what the snapshot
    sealed. The snapshot row, the file and the sealed leaves are read in ``view``'s one
    snapshot.
    """
    if version is None:
        snapshot = _latest_snapshot(view.session, run_id)
        if snapshot is None:
            raise RunNotSealed(run_id)
        file = RunEventFile(view.conn, run_id)
    else:
        snapshot = snapshot_at(view.session, run_id, version)
        if snapshot is None:
            raise VersionNotSealed(run_id, version)
        file = RunEventFile(
            view.conn,
            run_id,
            end_before_ns=version_end_ns(snapshot),
            received_by=snapshot.data_as_of,
        )
    with file, _events_sink(events_to, compress_events) as write:
        file.write_to(write)
        digests = file.finish()
    if version is not None and (digests.sha256, digests.count) != (
        snapshot.events_sha256,
        snapshot.events_count,
    ):
        raise SnapshotOutdated(
            f"the events of run {run_id!r} version {version} can no longer be rebuilt: "
            f"{digests.count} events stored by {utc_ms(snapshot.data_as_of)} hash to "
            f"{digests.sha256[:16]}…, the version sealed {snapshot.events_count} "
            f"({snapshot.events_sha256[:16]}…); an ingest commit overlapped its seal, or "
            "its raw spans were pruned"
        )
    if (digests.sha256, digests.count) != (snapshot.events_sha256, snapshot.events_count):
        raise SnapshotOutdated(
            f"run {run_id!r} has {digests.count} events (sha256 {digests.sha256[:16]}…) "
            f"but snapshot v{snapshot.version} sealed {snapshot.events_count} "
            f"(sha256 {snapshot.events_sha256[:16]}…): reseal with "
            f"`tpmledger analyze {shlex.quote(run_id)}`"
        )
    proofs = build_minute_proofs(run_id, _sealed_leaves(view.session, snapshot, digests))
    if (proofs["merkle_root"], proofs["tree_size"]) != (snapshot.merkle_root, snapshot.tree_size):
        raise SnapshotOutdated(
            f"minute Merkle root {proofs['merkle_root']} differs from snapshot "
            f"v{snapshot.version}'s {snapshot.merkle_root}"
        )
    predicate = _predicate(snapshot)
    envelope = _sign(predicate, key)
    return RunSummary(
        run_id=run_id,
        seal=snapshot.seal,
        events=None,
        predicate=predicate,
        envelope=envelope,
        bundle=bundle_from_envelope(envelope, key.fingerprint),
        minute_proofs=proofs,
        public_pem=key.public_pem,
        key_fingerprint=key.fingerprint,
        checkpoint=signed_checkpoint(run_id, proofs, key, log_origin),
    )


@contextmanager
def _events_sink(path: Path | None, compress: bool) -> Iterator[Callable[[bytes], object]]:
    """Where the streamed event file goes: a file (gzip'd, no name or time in its header,
    so equal files compress to equal bytes), or nowhere (only hashed)."""
    if path is None:
        yield lambda block: None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw:
        if not compress:
            yield raw.write
            return
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as out:
            yield out.write


def _sealed_leaves(
    session: Session, snapshot: Snapshot, digests: FileDigests
) -> list[dict[str, Any]]:
    """Every minute's leaf, first to last: the version's sealed figures of the minutes
    with attempts, a constant leaf for the others (retries 0, or null when the run does
    not measure retries), each with the streamed file's digest of its lines."""
    busy = busy_minute_rows(session, snapshot.run_id, snapshot.version, LEAF_FIGURES)
    figures = {int(row.pop("minute_utc").timestamp()) * SECOND_NS: row for row in busy}
    retries_when_empty = 0 if (snapshot.metrics or {}).get("retry_rate") is not None else None
    empty = {name: 0 for name in LEAF_FIGURES} | {"retries": retries_when_empty}
    leaves: list[dict[str, Any]] = []
    for i, (count, digest) in enumerate(zip(digests.counts, digests.digests, strict=True)):
        minute_ns = digests.first_minute_ns + i * MINUTE_NS
        row = figures.pop(minute_ns, None) if count else None
        if count and (row is None or int(row["calls_in_minute"]) != count):
            raise SnapshotOutdated(
                f"minute {minute_text_ns(minute_ns)}: {count} events in the file, but "
                f"snapshot v{snapshot.version} sealed "
                f"{'none' if row is None else row['calls_in_minute']}"
            )
        leaf: dict[str, Any] = {"minute_utc": minute_text_ns(minute_ns)}
        leaf |= row if row is not None else empty
        leaf["events_sha256"] = digest
        leaves.append(leaf)
    if figures:
        raise SnapshotOutdated(
            f"snapshot v{snapshot.version} sealed {len(figures)} minutes with attempts that "
            "the event file does not hold"
        )
    return leaves


def summary_from_events(
    events: pl.DataFrame,
    key: SigningKey,
    *,
    run_id: str,
    computed_at: str,
    seal: str = "00" * 32,
    version: int = 1,
    log_origin: str | None = None,
) -> RunSummary:
    """A signed summary of canonical ``events`` computed in memory, without a database or a
    stored snapshot (``seal`` and ``version`` are only labels): for benchmarks and tests."""
    event_file = build_event_file(events)
    analysis = fold_events(events, RunContext(run_id=run_id))
    proofs = build_minute_proofs(run_id, leaves_from_minutes(analysis.minutes, event_file))
    predicate = build_predicate(
        analysis.figures,
        events_sha256=event_file.sha256,
        events_count=event_file.count,
        merkle_root=proofs["merkle_root"],
        tree_size=proofs["tree_size"],
        snapshot_version=version,
        seal=seal,
        computed_at=computed_at,
        generator={"name": "tpmledger", "version": __version__},
    )
    envelope = _sign(predicate, key)
    return RunSummary(
        run_id=run_id,
        seal=seal,
        events=event_file.tobytes(),
        predicate=predicate,
        envelope=envelope,
        bundle=bundle_from_envelope(envelope, key.fingerprint),
        minute_proofs=proofs,
        public_pem=key.public_pem,
        key_fingerprint=key.fingerprint,
        checkpoint=signed_checkpoint(run_id, proofs, key, log_origin),
    )


def signed_checkpoint(
    run_id: str, proofs: dict[str, Any], key: SigningKey, log_origin: str | None = None
) -> str:
    """The minute tree head of ``proofs`` as a checkpoint signed with ``key`` (origin
    ``<log_origin, default the host name>/tpmledger/runs/<run_id>``)."""
    return head_checkpoint(run_id, proofs["tree_size"], proofs["merkle_root"], key, log_origin)


def _predicate(snapshot: Snapshot) -> dict[str, Any]:
    document = snapshot.document or {}
    return build_predicate(
        {**snapshot.metrics, "run_id": snapshot.run_id},
        events_sha256=snapshot.events_sha256,
        events_count=snapshot.events_count,
        merkle_root=snapshot.merkle_root,
        tree_size=snapshot.tree_size,
        snapshot_version=snapshot.version,
        seal=snapshot.seal,
        computed_at=document.get("computed_at") or utc_ms(snapshot.computed_at),
        generator=document.get("generator") or {"name": "tpmledger", "version": __version__},
    )


def _sign(predicate: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    return sign_envelope(statement_payload(build_statement(predicate)), key.private_key)


def write_export(summary: RunSummary, out_dir: Path, *, tiles: bool = False) -> list[Path]:
    """Write the export files into ``out_dir`` (created if needed) and, with ``tiles``, the
    minute tree as C2SP tiles and entry bundles under ``out_dir/tile``; return the paths
    written (tiles as their one ``tile`` folder).

    ``events.jsonl`` is written only when the summary holds the events
    (:func:`summary_from_events`); :func:`build_summary` streamed it already."""
    out_dir.mkdir(parents=True, exist_ok=True)
    contents: dict[str, bytes] = {
        "summary.dsse.json": _json_bytes(summary.envelope),
        "summary.sigstore.json": _json_bytes(summary.bundle),
        "service.pub": summary.public_pem.encode("ascii"),
        "SUMMARY.txt": summary.text.encode("utf-8"),
        "checkpoint": summary.checkpoint.encode("utf-8"),
    }
    if summary.events is not None:
        contents["events.jsonl"] = summary.events
    paths = []
    for name in EXPORT_FILES:
        path = out_dir / name
        if name == "minute-proofs.json":
            # Written as it is encoded: a month of minutes is ~70 MB of JSON text.
            with path.open("w", encoding="utf-8") as out:
                json.dump(summary.minute_proofs, out, indent=2, ensure_ascii=False)
                out.write("\n")
        elif name in contents:
            path.write_bytes(contents[name])
        else:
            continue
        paths.append(path)
    if tiles:
        paths.append(write_tiles(summary.minute_proofs, out_dir))
    return paths


def write_tiles(proofs: dict[str, Any], out_dir: Path) -> Path:
    """The tree of ``minute-proofs.json`` as static tiles under ``out_dir/tile``: every full
    tile and the partial tiles of this tree size, entry bundles holding the leaf bytes."""
    minutes = proofs["minutes"]
    hashes = [bytes.fromhex(m["leaf_hash"]) for m in minutes]
    entries = [leaf_bytes(m["leaf"]) for m in minutes]
    for tile, data in tree_tile_files(hashes, entries):
        path = out_dir / tile.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return out_dir / "tile"


def _latest_snapshot(session: Session, run_id: str) -> Snapshot | None:
    """The run's newest snapshot; None when never sealed. Raises :class:`RunNotSealed`
    naming the run as unknown when nothing was ever stored for it."""
    query = (
        select(Snapshot).where(Snapshot.run_id == run_id).order_by(Snapshot.version.desc()).limit(1)
    )
    found = session.scalars(query).first()
    if found is None and not run_is_known(session, run_id):
        raise RunNotSealed(run_id, known=False)
    return found


def _json_bytes(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
