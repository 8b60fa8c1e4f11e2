"""The ingest process stays small: it must not load Polars/Arrow for commands it never runs."""

import subprocess
import sys

import pytest

_PROBE = """
import sys
from tpmledger.cli.main import build_parser
build_parser()
import tpmledger.ingest.service
from tpmledger.read_api import build_router
build_router("postgresql://unused/db")
print(",".join(m for m in ("polars", "pyarrow", "tpmledger.analytics", "dash") if m in sys.modules))
"""


@pytest.mark.slow
def test_ingest_process_imports_no_analytics_stack() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "", f"loaded at ingest start-up: {result.stdout.strip()}"


_REQUEST_PROBE = """
import sys
from fastapi import FastAPI
from fastapi.testclient import TestClient
from tpmledger.read_api import build_router
app = FastAPI()
app.include_router(build_router(sys.argv[1]))
client = TestClient(app)
for path in ("/v1/runs", "/v1/runs/live-run", "/v1/runs/live-run/minutes",
             "/v1/runs/sealed-run", "/v1/runs/sealed-run/minutes"):
    assert client.get(path).status_code == 200, path
print(",".join(m for m in ("polars", "pyarrow", "numba", "dash") if m in sys.modules))
"""


@pytest.mark.slow
def test_serving_run_figures_loads_no_analytics_engine(database_url: str) -> None:
    # Request time, not only start-up: the run object, minutes and the run list of a live
    # and of a sealed run are read from minute rows (analytics/views/current_table.py), so the
    # ingest process (300 MB target) never loads Polars, Arrow or Numba to answer them.
    from tests.analytics.seeding import store
    from tests.storage.builders import attempt_row
    from tpmledger.analytics.live.live_updater import LiveUpdater
    from tpmledger.analytics.seal.sealing import seal_run

    store(database_url, [attempt_row(run_id="sealed-run")])
    seal_run(database_url, "sealed-run")
    store(database_url, [attempt_row(run_id="live-run")])
    LiveUpdater(database_url).update_once()
    result = subprocess.run(
        [sys.executable, "-c", _REQUEST_PROBE, database_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "", f"loaded to answer: {result.stdout.strip()}"


_LOG_PROBE = """
import sys
import tpmledger.analytics.proofs.run_log
import tpmledger.read_api.log_routes
print(",".join(m for m in ("polars", "pyarrow", "numba", "dash") if m in sys.modules))
"""


@pytest.mark.slow
def test_serving_checkpoints_and_tiles_loads_no_analytics_engine() -> None:
    # Checkpoints and tiles are served by the ingest process (docs/provenance.md#tiles).
    result = subprocess.run(
        [sys.executable, "-c", _LOG_PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "", f"loaded to serve the log: {result.stdout.strip()}"
