"""``tpmledger analyze|snapshots|verify|events|sweep`` against a real PostgreSQL."""

from __future__ import annotations

import hashlib
import io
import json
import sys

import psycopg
import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.cli.main import main
from tpmledger.storage.server.database import libpq_url

SECOND = 1_000_000_000


@pytest.fixture
def run_url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A database holding run 'cli-run': 3 minutes, 2 shards, 30 attempts."""
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    rows = [
        attempt_row(
            run_id="cli-run",
            shard_id=str(i % 2),
            start_ns=BASE_NS + i * 6 * SECOND,
            end_ns=BASE_NS + i * 6 * SECOND + 2 * SECOND,
            prompt_tokens=100 + i,
            completion_tokens=40 + i,
            ttft_s=0.25,
        )
        for i in range(30)
    ]
    store(database_url, rows)
    return database_url


@pytest.mark.slow
def test_events_sha256sum_equals_sealed_events_sha256(
    run_url: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert main(["analyze", "cli-run", "--json"]) == 0
    metrics = json.loads(capsysbinary.readouterr().out)
    assert main(["events", "cli-run"]) == 0
    data = capsysbinary.readouterr().out
    assert data.count(b"\n") == 30
    assert hashlib.sha256(data).hexdigest() == metrics["events_sha256"]
    assert metrics["snapshot_version"] == 1 and metrics["attempts"] == 30


def test_analyze_twice_keeps_one_version_and_snapshots_lists_it(
    run_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "cli-run"]) == 0
    out = capsys.readouterr().out
    assert "sealed new version 1" in out
    assert "sweep_id: none" in out  # the run has no sweep: not an unmeasured figure
    assert main(["analyze", "cli-run"]) == 0
    assert "unchanged; newest version 1" in capsys.readouterr().out
    assert main(["snapshots", "cli-run", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["version"] for s in listed["snapshots"]] == [1]


def test_verify_passes_then_names_minute_and_field_after_tampering(
    run_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "cli-run"]) == 0
    assert main(["verify", "cli-run"]) == 0
    assert "OK" in capsys.readouterr().out
    # Change one token count of the attempt that ends in the second minute first.
    with psycopg.connect(libpq_url(run_url), autocommit=True) as conn:
        conn.execute(
            "UPDATE attempts SET prompt_tokens = prompt_tokens + 7 WHERE end_ns = "
            "(SELECT min(end_ns) FROM attempts WHERE end_ns >= %s)",
            (BASE_NS + MINUTE_NS,),
        )
    assert main(["verify", "cli-run"]) == 1
    out = capsys.readouterr().out
    assert "minute 2026-02-01T03:45:00Z shard *: prompt_tpm_in: sealed" in out
    assert "minute 2026-02-01T03:45:00Z shard 0: prompt_tpm_in" in out
    assert "events_sha256" in out and "merkle_root" in out
    assert "minute 2026-02-01T03:44:00Z" not in out


def test_unknown_run_exits_2(run_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "nope"]) == 2
    assert "no such run: 'nope'" in capsys.readouterr().err
    assert main(["verify", "nope"]) == 2
    assert "no such run: 'nope'" in capsys.readouterr().err


def test_sweep_prints_thresholds_and_knee(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_RESEAL_QUIET_S", "0")  # the runs count as quiet: final
    # Caps 4 and 8 per run; cap 8 doubles throughput, so it is the knee.
    for cap, per_minute in ((4, 2), (8, 4)):
        rows = [
            attempt_row(
                run_id=f"sw-{cap}",
                sweep_id="sw",
                concurrency_cap=cap,
                start_ns=BASE_NS + m * MINUTE_NS + k * SECOND,
                end_ns=BASE_NS + m * MINUTE_NS + k * SECOND + SECOND,
            )
            for m in range(4)
            for k in range(per_minute)
        ]
        store(database_url, rows)
        assert main(["analyze", f"sw-{cap}"]) == 0
    capsys.readouterr()
    assert main(["sweep", "sw"]) == 0
    out = capsys.readouterr().out
    assert '"min_throughput_gain": 0.02' in out
    assert "knee (recommended cap): 8" in out


def test_analyze_of_a_running_run_is_provisional_and_the_sweep_says_live(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpmledger.analytics.live.live_updater import LiveUpdater

    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    for cap, per_minute in ((4, 2), (8, 4)):
        rows = [
            attempt_row(
                run_id=f"lv-{cap}",
                sweep_id="lv",
                concurrency_cap=cap,
                start_ns=BASE_NS + m * MINUTE_NS + k * SECOND,
                end_ns=BASE_NS + m * MINUTE_NS + k * SECOND + SECOND,
            )
            for m in range(4)
            for k in range(per_minute)
        ]
        store(database_url, rows)
    LiveUpdater(database_url).update_once()
    assert main(["analyze", "lv-8"]) == 0  # data stored a moment ago: still running
    assert "provisional" in capsys.readouterr().out
    assert main(["sweep", "lv"]) == 0
    out = capsys.readouterr().out
    assert "cap    8  live" in out and "cap    4  live" in out
    # Live caps carry call success too (docs/metrics.md#live-approximations); no None printed.
    assert "call_success_rate not measured" not in out and "None" not in out
    assert "knee (recommended cap): 8 — provisional: cap(s) 4, 8 still live" in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_large_seal_shows_one_progress_line_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tpmledger.cli.analytics_commands import SealProgress

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress = SealProgress("big", min_attempts=10)
    progress(4, 12)
    progress(12, 12)
    progress.finish()
    assert terminal.getvalue() == (
        "\rsealing big: 4 of 12 attempts read (33%)\rsealing big: 12 of 12 attempts read (100%)\n"
    )
    small = _Terminal()
    monkeypatch.setattr(sys, "stderr", small)
    quiet = SealProgress("small", min_attempts=10)
    quiet(3, 5)
    quiet.finish()
    assert small.getvalue() == ""  # a small run seals in moments: no line


def test_analyze_prints_the_bottleneck_and_the_targets(
    run_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "cli-run", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # 3 minutes: one inner minute, 2 shards at cap 16 with at most one attempt in flight.
    assert metrics["bottleneck"]["verdict"] == "demand"
    [target] = metrics["targets"]
    assert (target["provider"], target["model"]) == ("openai", "gpt-test")
    assert sum(m["used_rpm"] for m in target["minutes"]) == 30
    assert all(m["quota_tpm"] is None and m["headroom_tokens"] is None for m in target["minutes"])
    assert main(["analyze", "cli-run"]) == 0
    out = capsys.readouterr().out
    assert "verdict: demand" in out
    assert "target openai/gpt-test: 3 minutes, lowest quota headroom not measured" in out
