"""Formatting: not-measured is said in words, times are UTC and labelled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tpmledger.dashboard.display import fmt_int, fmt_rate, fmt_seconds, fmt_utc, plot_minute


def test_missing_figures_read_not_measured_never_zero() -> None:
    assert fmt_int(None) == fmt_rate(None) == fmt_seconds(None) == "not measured"
    assert fmt_int(0) == "0" and fmt_rate(0.0) == "0.0 %"


def test_values() -> None:
    assert fmt_int(1234567.4) == "1,234,567"
    assert fmt_rate(0.9876) == "98.8 %"
    assert fmt_seconds(0.25) == "250 ms" and fmt_seconds(2.5) == "2.50 s"


def test_times_are_converted_to_utc_and_labelled() -> None:
    cet = datetime(2026, 2, 1, 4, 47, tzinfo=timezone(timedelta(hours=1)))
    assert fmt_utc(cet) == "2026-02-01 03:47 UTC"
    assert fmt_utc("2026-02-01T03:47:05.123Z", seconds=True) == "2026-02-01 03:47:05 UTC"
    assert plot_minute("2026-02-01T03:47:00Z") == "2026-02-01 03:47"
    assert fmt_utc(datetime(2026, 2, 1, tzinfo=UTC)) == "2026-02-01 00:00 UTC"


def test_verify_commands_quote_hostile_run_ids() -> None:
    import shlex

    from tpmledger.dashboard.components.provenance_panel import verify_commands

    hostile = "x; touch /tmp/PWNED #"
    for line in verify_commands(hostile, "ab" * 32).splitlines():
        command = line.split("   #")[0]
        words = shlex.split(command)
        assert words[0] in ("tpmledger", "sha256sum")
        assert all(";" not in w or hostile in w for w in words)  # one argument, never a command
    assert "tpmledger verify -- 'x; touch /tmp/PWNED #'" in verify_commands(hostile, "00")


@pytest.mark.parametrize(
    "run_id", ["--help", "-x", "-", "--out=/tmp/evil", "a b", "line\nbreak", "tab\there", "it's"]
)
def test_copyable_commands_never_turn_a_run_id_into_an_option(run_id: str) -> None:
    """The real `tpmledger` parser reads every copyable line back: the run id (and the
    export folder) come back as values, whatever they start with or contain."""
    import shlex
    import subprocess
    from pathlib import Path

    from tpmledger.cli.main import build_parser
    from tpmledger.dashboard.components.provenance_panel import verify_commands

    lines = verify_commands(run_id, "ab" * 32).splitlines()
    assert len(lines) == 4  # one command a line, even for a run id with a newline
    parsed = []
    for line in lines[:3]:
        # What a POSIX shell makes of the line (bash: $'…' quoting included).
        printed = subprocess.run(
            ["bash", "-c", "printf '%s\\0' " + line.split(" ", 1)[1]],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        words = printed.split("\0")[:-1]
        parsed.append(vars(build_parser().parse_args(words)))
    assert parsed[0]["command"] == "verify" and parsed[0]["run_id"] == run_id
    assert parsed[1]["run_id"] == run_id and parsed[1]["out"] == Path(f"./{run_id}-summary")
    assert parsed[2]["path"] == Path(f"./{run_id}-summary")
    sha = shlex.split(lines[3].split("   #")[0]) if "\n" not in run_id else None
    assert sha is None or sha[:2] == ["sha256sum", "--"]
