"""One formula per run figure, proven by behaviour (docs/architecture.md#one-formula).

The registry refuses a second formula under a taken name; the seal and the live path (the
live updater writing minute rows, the run object read from them) compute the figures
through the same registered functions (recorded while each path runs), every registered
formula is used by both paths or named below as one this run cannot exercise, and on a run
whose minutes are all settled they publish the same values.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.analytics.live.test_live_run_figures import RUN_ID, _calls
from tests.analytics.live.test_minute_state import BASE, MINUTE, _window
from tests.analytics.seeding import store
from tpmledger.analytics.kernels import figure_registry
from tpmledger.analytics.kernels.figure_registry import (
    FigureDeclaredTwice,
    figure,
    recording,
    substituted,
)
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.kernels.second_samples import window_samples
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import minute_rows, minute_targets
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.verdicts.bottleneck import run_object_with_bottleneck
from tpmledger.analytics.verdicts.run_diagnostics import TargetSaturation
from tpmledger.analytics.views.live_view import run_view
from tpmledger.provenance.event_file import EVENT_SCHEMA
from tpmledger.storage.readers.live_read import live_minute_rows, sealed_minute_rows
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
#: A minute row's formulas: concurrency from per-second samples, derived counts, rates.
MINUTE_ROW = {"minute_concurrency", "minute_counts", "minute_rates"}
#: Registered formulas this run cannot reach, and why (each has a test of its own).
NOT_EXERCISED = {
    "slot_held_by_tool": "no tool spans",
    "target_saturation": "no target declares a cap",
}
#: Concurrency columns of a minute row: the seal and the live updater must agree.
CONCURRENCY = ("in_flight_mean", "in_flight_max", "queue_depth_mean", "queue_depth_max")


def test_a_second_formula_for_a_figure_is_refused() -> None:
    with pytest.raises(FigureDeclaredTwice, match="peak_minute"):

        @figure("peak_minute")
        def another_peak() -> None:  # pragma: no cover - never registered
            return None

    assert figure_registry.FIGURES["peak_minute"].__module__.endswith("run_level")


def test_the_seal_and_the_live_run_object_share_every_run_figure(database_url: str) -> None:
    rows = _calls(random.Random(38), 300)
    store(database_url, rows)
    with recording() as live_update:
        LiveUpdater(database_url).update_once()
    live_rows = in_one_snapshot(database_url, live_minute_rows, RUN_ID)
    with recording() as live_path:  # GET /v1/runs/{id} of the live run
        live = in_one_snapshot(database_url, run_object_with_bottleneck, RUN_ID)
    assert live is not None and live["live"] is True
    with recording() as seal_path:
        version = seal_run(database_url, RUN_ID).version
    sealed = in_one_snapshot(database_url, run_view, RUN_ID)
    assert sealed is not None and sealed["seal"] is not None

    formulas = set(RUN_LEVEL.values()) | DIAGNOSTICS
    assert formulas <= live_path, formulas - live_path
    assert formulas <= seal_path, formulas - seal_path
    assert live_update >= MINUTE_ROW, MINUTE_ROW - live_update
    assert seal_path >= MINUTE_ROW, MINUTE_ROW - seal_path
    # No registered formula is left to one path: a new one must be reached by both.
    live_all = live_update | live_path
    assert set(figure_registry.FIGURES) - (live_all & seal_path) == set(NOT_EXERCISED)
    # The minute rows' concurrency, live from the kept samples and sealed from the chunk's
    # series, through the one formula: equal in every (shard, minute) both hold.
    stored = in_one_snapshot(database_url, sealed_minute_rows, RUN_ID, version)
    by_key = {(r["shard_id"], r["minute_utc"]): r for r in stored}
    shared = [r for r in live_rows if (r["shard_id"], r["minute_utc"]) in by_key]
    assert sum(r["shard_id"] == "*" for r in shared) == sum(r["shard_id"] == "*" for r in stored)
    assert any(r["in_flight_max"] > 0 for r in shared)
    for row in shared:
        want = by_key[(row["shard_id"], row["minute_utc"])]
        got = {c: row[c] for c in CONCURRENCY if want[c] is not None}
        assert got == {c: want[c] for c in got}, (row["shard_id"], row["minute_utc"])
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


# --- Mutation: a path that really calls a formula changes when the formula does. ---------
# Names can be dodged, behaviour cannot: with a registered formula swapped for a perturbed
# one (figure_registry.substituted), the live fold and the seal must both give other output,
# and the same output again once it is restored.

_TARGETS = [("p", "m"), ("p", "n"), (None, "m")]


def _attempts(seed: int = 38) -> pl.DataFrame:
    """A few minutes of attempts (several shards, queue waits, intervals across minutes),
    each to a (provider, model) target."""
    window = _window(seed, 600)
    pick = np.random.default_rng(seed).integers(0, len(_TARGETS), window.height)
    return window.with_columns(
        provider=pl.Series([_TARGETS[i][0] for i in pick], dtype=pl.String),
        model=pl.Series([_TARGETS[i][1] for i in pick], dtype=pl.String),
    )


def _live(attempts: pl.DataFrame) -> tuple[list[dict[str, Any]], list[Any]]:
    """What the live updater folds and publishes: a minute's rows and its targets."""
    minutes = [BASE + i * MINUTE for i in range(4)]
    states = {m: MinuteState(m) for m in minutes}
    fold_ending(states, attempts)
    fold_overlap(states, attempts)
    rows = minute_rows([states[m] for m in minutes], {"0": 4}).to_dicts()
    return rows, [minute_targets(states[m]) for m in minutes]


def _sealed(attempts: pl.DataFrame) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the seal computes: the minute table (its streaming walk, one chunk) and the
    target saturation diagnostic."""
    events = attempts.filter(pl.col("rollup") == 0).select(
        pl.col(n).cast(t) if n in attempts.columns else pl.lit(None, t).alias(n)
        for n, t in EVENT_SCHEMA.items()
    )
    minutes = fold_events(events, RunContext(caps={"0": 4})).minutes.to_dicts()
    keys = attempts.select("trace_id", "span_id", "provider", "model").rows()
    saturation = TargetSaturation.of({t: 2 for t in _TARGETS}, keys)
    assert saturation is not None
    saturation.add(events)
    return minutes, saturation.figures()


def _later_end(formula: Callable[..., Any]) -> Callable[..., Any]:
    def perturbed(*args: Any, **kwargs: Any) -> Any:
        began, ended, queued = formula(*args, **kwargs)
        return began, ended + 1, queued

    return perturbed


def _one_more(formula: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args, **kwargs: formula(*args, **kwargs) + 1


@pytest.mark.parametrize(
    ("name", "perturb"), [("second_sample_bounds", _later_end), ("second_samples", _one_more)]
)
def test_the_live_fold_and_the_seal_both_run_the_registered_samples(
    name: str, perturb: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    attempts = _attempts()
    live, sealed = _live(attempts), _sealed(attempts)
    with substituted(name, perturb):
        live_now, sealed_now = _live(attempts), _sealed(attempts)
    assert live_now[0] != live[0], "the live minute rows do not use " + name
    assert live_now[1] != live[1], "the live targets do not use " + name
    assert sealed_now[0] != sealed[0], "the sealed minute table does not use " + name
    if name == "second_sample_bounds":  # the seal counts target levels from the bounds' steps
        assert sealed_now[1] != sealed[1], "the sealed target saturation does not use " + name
    assert (_live(attempts), _sealed(attempts)) == (live, sealed)  # restored


def test_a_substitution_reaches_every_caller_and_ends_with_the_block() -> None:
    formula = figure_registry.FIGURES["second_samples"]
    codes, low, high = (np.zeros(1, np.int64), np.array([5]), np.array([7]))
    assert window_samples(codes, low, high, 1, 4, 4).tolist() == [[0, 1, 1, 0]]
    with substituted("second_samples", _one_more):
        assert formula(codes, low, high, 1, 4, 4).tolist() == [[1, 2, 2, 1]]
        assert window_samples(codes, low, high, 1, 4, 4).tolist() == [[1, 2, 2, 1]]
    assert window_samples(codes, low, high, 1, 4, 4).tolist() == [[0, 1, 1, 0]]
