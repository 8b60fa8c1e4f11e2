"""Migration 0014 removes message content from attempts stored before ingest dropped it
(docs/configuration.md#message-content); its downgrade changes nothing."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine, libpq_url

MARKER = "SECRET-PROMPT-7f3a"

CONTENT_SPAN = {
    "gen_ai.operation.name": "chat",
    "gen_ai.usage.input_tokens": 12,
    "gen_ai.input.messages": json.dumps([{"role": "user", "content": MARKER}]),
    "gen_ai.prompt.0.content": MARKER,
    "llm.input_messages.0.message.content": MARKER,
    "input.value": MARKER,
    "input.mime_type": "application/json",
    "tpmledger.deadline_s": 30,
}
CONTENT_RESOURCE = {"tpmledger.run.id": "old-run", "gen_ai.system_instructions": MARKER}
PLAIN_SPAN = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 3}


def _insert(
    conn: psycopg.Connection, span_id: int, span: dict[str, Any], resource: dict[str, Any]
) -> None:
    conn.execute(
        "INSERT INTO attempts (trace_id, span_id, run_id, shard_id, call_id, call_id_explicit,"
        " start_ns, end_ns, status, span_name, span_kind, span_attributes, resource_attributes)"
        " VALUES (%s, %s, 'old-run', '0', %s, false, 1, 2, 'ok', 'chat', 3, %s, %s)",
        (
            b"\x01" * 16,
            span_id.to_bytes(8, "big"),
            str(span_id),
            json.dumps(span),
            json.dumps(resource),
        ),
    )


def _attributes(conn: psycopg.Connection) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    rows = conn.execute(
        "SELECT span_attributes, resource_attributes FROM attempts ORDER BY span_id"
    ).fetchall()
    return [(span, resource) for span, resource in rows]


def test_upgrade_scrubs_content_and_downgrade_keeps_it_scrubbed(empty_database_url: str) -> None:
    url = empty_database_url
    migrate.upgrade(url, "0012")
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        _insert(conn, 1, CONTENT_SPAN, CONTENT_RESOURCE)
        _insert(conn, 2, PLAIN_SPAN, {"tpmledger.run.id": "old-run"})
    get_engine(url).dispose()

    migrate.upgrade(url)
    with psycopg.connect(libpq_url(url)) as conn:
        (scrubbed_span, scrubbed_resource), (plain_span, plain_resource) = _attributes(conn)
        assert scrubbed_span == {
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": 12,
            "input.mime_type": "application/json",
            "tpmledger.deadline_s": 30,
        }
        assert scrubbed_resource == {"tpmledger.run.id": "old-run"}
        assert (plain_span, plain_resource) == (PLAIN_SPAN, {"tpmledger.run.id": "old-run"})
        found = conn.execute(
            "SELECT count(*) FROM attempts WHERE strpos(attempts::text, %s) > 0", (MARKER,)
        ).fetchone()
        assert found == (0,)

    get_engine(url).dispose()
    migrate.downgrade(url, "0012")
    with psycopg.connect(libpq_url(url)) as conn:
        assert _attributes(conn)[0] == (scrubbed_span, scrubbed_resource)
