"""A run id with a newline never splits a log line (tpmledger/cli/log_lines.py)."""

from __future__ import annotations

import subprocess
import sys

from tpmledger.cli.log_lines import one_line

_LOG = """
import logging
from tpmledger.cli.main import configure_logging
configure_logging("serve", False)
log = logging.getLogger("tpmledger.analytics.worker")
log.info("%s unchanged since v%d; not resealed", "evil\\n2026-01-01 INFO forged: ok", 3)
try:
    raise ValueError("boom")
except ValueError:
    log.exception("sealing %s failed", "a\\rb\\u2028c")
"""


def test_messages_are_escaped_and_tracebacks_kept() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _LOG], capture_output=True, text=True, timeout=60, check=True
    )
    lines = result.stderr.splitlines()
    assert lines[0].endswith(
        "INFO tpmledger.analytics.worker: evil\\n2026-01-01 INFO forged: ok unchanged since v3; "
        "not resealed"
    )
    assert lines[1].endswith("ERROR tpmledger.analytics.worker: sealing a\\rb\\u2028c failed")
    assert lines[2] == "Traceback (most recent call last):"  # a traceback stays readable
    assert not any(line.startswith("2026-01-01 INFO forged") for line in lines)


def test_one_line() -> None:
    assert one_line("plain run-1 é") == "plain run-1 é"
    assert one_line("a\nb\tc\x1b[31m\x00") == "a\\nb\tc\\x1b[31m\\x00"
