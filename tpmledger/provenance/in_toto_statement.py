"""The in-toto Statement v1 that a run summary signs (docs/provenance.md "Signed run summary").

The statement's only subject is the canonical event file ``events.jsonl``; its predicate
(type ``urn:tpmledger:run-summary:v1``) carries the run-level figures of docs/metrics.md plus the
event-file digest, the minute Merkle root and the sealed snapshot it was taken from. The
DSSE payload is the RFC 8785 (JCS) serialization, so the same statement always signs the
same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import rfc8785

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:tpmledger:run-summary:v1"
EVENTS_SUBJECT_NAME = "events.jsonl"
EVENTS_FORMAT = "tpmledger.events.v1"

# The figures of the docs/metrics.md run object that the predicate carries. The object's
# ``events_sha256``, ``seal`` and ``snapshot_version`` appear under ``events`` / ``snapshot``.
RUN_FIGURE_KEYS: tuple[str, ...] = (
    "run_id",
    "attempts",
    "logical_calls",
    "shard_count",
    "first_event_utc",
    "last_event_utc",
    "active_minutes",
    "peak_minute",
    "peak_completion_minute",
    "sustained_tpm_total",
    "attempt_success_rate",
    "call_success_rate",
    "retry_rate",
    "retry_causes",
    "ttft_s",
    "shard_balance",
)
# Figures of the run object the predicate carries when the snapshot has them, that need more
# than the event file to recompute: the bottleneck verdict reads the rate-limit state of
# every attempt (docs/metrics.md#bottleneck). Versions sealed before it carry none.
CARRIED_KEYS: tuple[str, ...] = ("bottleneck",)
PEAK_MINUTE_KEYS: tuple[str, ...] = (
    "minute_utc",
    "shard_count",
    "calls_in_minute",
    "completion_tpm_out",
    "prompt_tpm_in",
    "tpm_total",
)


class StatementError(ValueError):
    """The payload is not a tpmledger run-summary statement."""


def build_predicate(
    run_figures: Mapping[str, Any],
    *,
    events_sha256: str,
    events_count: int,
    merkle_root: str,
    tree_size: int,
    snapshot_version: int,
    seal: str,
    computed_at: str,
    generator: Mapping[str, Any],
) -> dict[str, Any]:
    """The run-summary predicate from run figures (the run object's names, docs/metrics.md)
    and the snapshot's identifiers."""
    missing = [k for k in RUN_FIGURE_KEYS if k not in run_figures]
    if missing:
        raise StatementError(f"run figures lack {', '.join(missing)}")
    predicate: dict[str, Any] = {k: run_figures[k] for k in RUN_FIGURE_KEYS}
    for key in CARRIED_KEYS:  # signed as sealed; not recomputable from events.jsonl alone
        if key in run_figures:
            predicate[key] = run_figures[key]
    predicate.update(
        events={"sha256": events_sha256, "count": events_count, "format": EVENTS_FORMAT},
        minutes={"merkle_root": merkle_root, "tree_size": tree_size},
        snapshot={"version": snapshot_version, "seal": seal, "computed_at": computed_at},
        generator=dict(generator),
    )
    return predicate


def build_statement(predicate: Mapping[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 whose subject is ``events.jsonl`` with the predicate's digest."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": EVENTS_SUBJECT_NAME, "digest": {"sha256": predicate["events"]["sha256"]}}
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


def statement_payload(statement: Mapping[str, Any]) -> bytes:
    """The JCS bytes that the DSSE envelope carries and signs."""
    return rfc8785.dumps(dict(statement))


def parse_statement(payload: bytes) -> dict[str, Any]:
    """Decode a signed payload and check it is a run-summary statement; return it."""
    try:
        statement = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StatementError(f"payload is not JSON: {exc}") from exc
    if not isinstance(statement, dict):
        raise StatementError("payload is not a JSON object")
    if statement.get("_type") != STATEMENT_TYPE:
        raise StatementError(f"_type is {statement.get('_type')!r}, expected {STATEMENT_TYPE}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise StatementError(
            f"predicateType is {statement.get('predicateType')!r}, expected {PREDICATE_TYPE}"
        )
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise StatementError("predicate is missing")
    for key in (*RUN_FIGURE_KEYS, "events", "minutes", "snapshot", "generator"):
        if key not in predicate:
            raise StatementError(f"predicate lacks {key!r}")
    shapes = {"events": ("sha256", "count"), "minutes": ("merkle_root", "tree_size")}
    for key, fields in shapes.items():
        value = predicate[key]
        if not isinstance(value, dict) or any(f not in value for f in fields):
            raise StatementError(f"predicate {key!r} lacks {' or '.join(fields)}")
    return statement


def subject_sha256(statement: Mapping[str, Any], name: str = EVENTS_SUBJECT_NAME) -> str:
    """The sha256 digest the statement binds to the subject called ``name``."""
    for subject in statement.get("subject") or []:
        if isinstance(subject, dict) and subject.get("name") == name:
            digest = (subject.get("digest") or {}).get("sha256")
            if isinstance(digest, str):
                return digest
    raise StatementError(f"statement has no sha256 subject named {name!r}")
