"""The ingest process stays small: it must not load Polars/Arrow for commands it never runs."""

import subprocess
import sys

_PROBE = """
import sys
from tpmledger.cli.main import build_parser
build_parser()
import ingest.service
from read_api import build_router
build_router("postgresql://unused/db")
print(",".join(m for m in ("polars", "pyarrow", "analytics", "dash") if m in sys.modules))
"""


def test_ingest_process_imports_no_analytics_stack() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "", f"loaded at ingest start-up: {result.stdout.strip()}"
