"""One formula per run figure, proven by behaviour (docs/architecture.md#one-formula).

The registry refuses a second formula under a taken name; the seal and the live run object
compute the run-level figures through the same registered functions (recorded while each
path runs), and on a run whose minutes are all settled they publish the same values.
"""

from __future__ import annotations

import random

import pytest

from tests.analytics.live.test_live_run_figures import RUN_ID, _calls
from tests.analytics.seeding import store
from tpmledger.analytics.kernels import figure_registry
from tpmledger.analytics.kernels.figure_registry import FigureDeclaredTwice, figure, recording
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.live_view import run_view
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.sealed_figures_store import read_diagnostics

#: The run object's figures that minute rows and totals decide, and their formulas.
RUN_LEVEL = {
    "peak_minute": "peak_minute",
    "peak_completion_minute": "peak_minute",
    "sustained_tpm_total": "sustained_tpm_total",
    "shard_balance": "shard_balance",
    "attempt_success_rate": "ratio",
    "call_success_rate": "ratio",
    "retry_rate": "ratio",
}
#: Diagnostics this run exercises (deadlines declared, retries seen), by formula.
DIAGNOSTICS = {"deadline_overrun", "retry_storm"}


def test_a_second_formula_for_a_figure_is_refused() -> None:
    with pytest.raises(FigureDeclaredTwice, match="peak_minute"):

        @figure("peak_minute")
        def another_peak() -> None:  # pragma: no cover - never registered
            return None

    assert figure_registry.FIGURES["peak_minute"].__module__.endswith("run_level")


def test_the_seal_and_the_live_run_object_share_every_run_figure(database_url: str) -> None:
    rows = _calls(random.Random(38), 300)
    store(database_url, rows)
    LiveUpdater(database_url).update_once()
    with recording() as live_path:
        live = in_one_snapshot(database_url, run_view, RUN_ID)
    assert live is not None and live["live"] is True
    with recording() as seal_path:
        version = seal_run(database_url, RUN_ID).version
    sealed = in_one_snapshot(database_url, run_view, RUN_ID)
    assert sealed is not None and sealed["seal"] is not None

    formulas = set(RUN_LEVEL.values()) | DIAGNOSTICS
    assert formulas <= live_path, formulas - live_path
    assert formulas <= seal_path, formulas - seal_path
    # Every minute of this run is closed: the rows are the same, so are the figures.
    for name in RUN_LEVEL:
        assert live[name] == sealed[name], (name, live[name], sealed[name])
    stored = in_one_snapshot(database_url, read_diagnostics, RUN_ID, version)
    assert stored is not None
    for name in DIAGNOSTICS:
        have, want = live["diagnostics"][name], stored.diagnostics[name]
        assert have is not None and want is not None
        for key in set(want) - {"live", "minutes"}:
            assert have[key] == want[key], (name, key, have[key], want[key])
