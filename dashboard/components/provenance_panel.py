"""The provenance panel: what the figures are sealed to, and how to check them (docs/provenance.md,
docs/dashboard.md)."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import quote

import dash_bootstrap_components as dbc
from dash import dcc, html

from tpmledger.dashboard.data.run_records import RunRecord, SnapshotInfo
from tpmledger.dashboard.display import fmt_utc


def download_links(api_base_url: str, run_id: str) -> list[tuple[str, str]]:
    """(label, URL) of the read API downloads on the ingest listener (docs/metrics.md)."""
    run = quote(run_id, safe="")
    return [
        ("events.jsonl (canonical event file)", f"{api_base_url}/v1/runs/{run}/events.jsonl"),
        ("signed summary (DSSE envelope)", f"{api_base_url}/v1/runs/{run}/summary"),
        ("public keys (JSON, every key that signed)", f"{api_base_url}/v1/keys"),
        (
            "current public key (PEM, the export's service.pub)",
            f"{api_base_url}/v1/keys/current.pem",
        ),
    ]


def verify_commands(run_id: str, events_sha256: str) -> str:
    """Shell lines anyone can run to re-check this run's seal and summary.

    Run ids are whatever exporters sent: every one is shell-quoted, so a pasted line can
    never run anything but tpmledger (``x; touch /tmp/PWNED #`` stays one argument), and
    comes after ``--``, so one beginning with ``-`` (``--help``) is never read as an
    option. The export folder starts with ``./`` for the same reason.
    """
    run = shell_word(run_id)
    folder = f"./{run_id}-summary"
    out = shell_word(folder)
    return "\n".join(
        [
            f"tpmledger verify -- {run}",
            f"tpmledger summary export --out {out} -- {run}",
            f"tpmledger summary verify -- {out}",
            f"sha256sum -- {shell_word(f'{folder}/events.jsonl')}   # expect {events_sha256}",
        ]
    )


def shell_word(text: str) -> str:
    """``text`` as one shell word on one line: single-quoted, or, when it holds a newline
    or another control character, ANSI-C quoted (``$'a\\nb'``, POSIX.1-2024, bash, zsh)."""
    if text.isprintable():
        return shlex.quote(text)
    return "$'" + "".join(_ansi_c(c) for c in text) + "'"


_ANSI_C_NAMES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _ansi_c(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if char in _ANSI_C_NAMES:
        return _ANSI_C_NAMES[char]
    if char.isprintable():
        return char
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code < 0x80
        else f"\\u{code:04x}"
        if code <= 0xFFFF
        else f"\\U{code:08x}"
    )


def covers_text(snap: SnapshotInfo) -> str:
    """What minutes the version holds: all of them, or a checkpoint's closed ones."""
    through = snap.through_minute_utc
    if through is None:
        return "every minute stored when it was sealed"
    if snap.final:
        return f"every minute, through {through}"
    return f"closed minutes through {through} (a checkpoint while the run is receiving data)"


def rebase_text(rebased: dict[str, Any], late_minutes: list[dict[str, Any]] | None = None) -> str:
    """The newest version's rebase in words: late attempts (per minute, when stored) and
    the minutes they changed."""
    minutes = ", ".join(str(m) for m in rebased.get("minutes_changed", []))
    late = int(rebased.get("late_attempts", 0))
    per_minute = ", ".join(
        f"{m['minute_utc']}: {int(m['late_attempts']):,}" for m in late_minutes or []
    )
    return (
        f"{late:,} attempt{'' if late == 1 else 's'} arrived after version "
        f"{rebased.get('from_version')} sealed their minutes"
        + (f" ({per_minute})" if per_minute else "")
        + f"; this version rebased {minutes} (no consistency proof across it)"
    )


def _field(label: str, value: str, field_id: str) -> list[html.Dt | html.Dd]:
    return [
        html.Dt(label, className="col-sm-3 fw-normal text-body-secondary"),
        html.Dd(html.Code(value, id=field_id, className="text-break"), className="col-sm-9"),
    ]


def provenance_panel(run: RunRecord, api_base_url: str) -> dbc.Card:
    """Digests of the latest snapshot, download links and the verify command."""
    snap = run.snapshot
    if snap is None:
        return dbc.Card(
            dbc.CardBody("Not sealed yet: the analytics worker seals a run once data arrives."),
            id="run-provenance",
        )
    rows = [
        *_field("events_sha256", snap.events_sha256, "run-prov-events-sha256"),
        *_field("seal", snap.seal, "run-prov-seal"),
        *_field("Merkle root", f"{snap.merkle_root} ({snap.tree_size} minutes)", "run-prov-merkle"),
        *_field("version", str(snap.version), "run-prov-version"),
        *_field("previous seal", snap.previous_seal or "none (first version)", "run-prov-previous"),
        *_field("computed", fmt_utc(snap.computed_at, seconds=True), "run-prov-computed"),
        *_field("events", f"{snap.events_count:,}", "run-prov-events-count"),
        *_field("covers", covers_text(snap), "run-prov-covers"),
    ]
    if snap.rebased is not None:
        rows += _field(
            "late data", rebase_text(snap.rebased, snap.late_minutes), "run-prov-rebased"
        )
    links = [
        html.Li(html.A(label, href=url, target="_blank", rel="noopener"))
        for label, url in download_links(api_base_url, run.run_id)
    ]
    return dbc.Card(
        dbc.CardBody(
            [
                html.Dl(rows, className="row mb-2 small"),
                html.H6("Downloads (read API on the ingest listener)", className="mt-2"),
                html.Ul(links, id="run-prov-downloads", className="small"),
                html.H6("Verify it yourself"),
                html.Div(
                    [
                        html.Pre(
                            verify_commands(run.run_id, snap.events_sha256),
                            id="run-prov-verify",
                            className="small mb-0 p-2 rounded bg-body-tertiary",
                        ),
                        dcc.Clipboard(target_id="run-prov-verify", className="copy-button"),
                    ],
                    className="position-relative",
                ),
            ]
        ),
        id="run-provenance",
    )
