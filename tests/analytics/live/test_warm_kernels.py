"""The live loop loads its compiled kernels while idle, so a burst's first update does not
(issue 39): the synthetic update computes real minutes, and after it a real update's
computations load no kernel the synthetic one did not."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tpmledger import compiled_kernels
from tpmledger.analytics import worker
from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import minute_rows
from tpmledger.analytics.live.warm_kernels import load_live_kernels, synthetic_attempts
from tpmledger.durations import MINUTE_NS
from tpmledger.storage.readers.commit_rows import FLAGS
from tpmledger.storage.readers.live_window import LIVE_WINDOW_KINDS
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

REPO = Path(__file__).resolve().parents[3]


def test_the_synthetic_attempts_are_a_read_and_fill_two_minutes() -> None:
    rows = synthetic_attempts()
    assert rows.columns == [*LIVE_WINDOW_KINDS, "run_id", *FLAGS]
    first = int(rows["end_ns"].min()) // MINUTE_NS * MINUTE_NS
    states = {m: MinuteState(m) for m in (first, first + MINUTE_NS)}
    fold_ending(states, rows)
    fold_overlap(states, rows)
    table = minute_rows(list(states.values()), {})
    whole = table.filter(table["shard_id"] == WHOLE_RUN).sort("minute_ns")
    # The timed-out try ends in the first minute, its retry (tokens) in the second.
    assert whole["calls_in_minute"].to_list() == [1, 1]
    assert whole["failures"].to_list() == [1, 0]
    assert whole["tpm_total"].to_list() == [0, 160]
    assert load_live_kernels() >= 0


# Every compiled kernel the live path may call, with the signatures loaded in this process.
_SIGNATURES = """
import numba
from tpmledger.analytics.kernels import group_kernels, second_runs
from tpmledger.storage.codecs import binary_copy

def loaded():
    return {
        (module.__name__, name, str(signature))
        for module in (group_kernels, second_runs, binary_copy)
        for name, value in vars(module).items()
        if isinstance(value, numba.core.registry.CPUDispatcher)
        for signature in value.signatures
    }
"""

_AFTER_LOADING = (
    _SIGNATURES
    + """
from tests.analytics.live.test_minute_state import BASE, MINUTE, _window
from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import (
    minute_extras, minute_facts, minute_rows, minute_targets,
)
from tpmledger.analytics.live.warm_kernels import load_live_kernels

load_live_kernels()
before = loaded()
assert before, "the synthetic update loaded no compiled kernel"
frame = _window(3, 400)
states = {BASE + i * MINUTE: MinuteState(BASE + i * MINUTE) for i in range(-1, 5)}
fold_ending(states, frame)
fold_overlap(states, frame)
minute_rows(list(states.values()), {"0": 4})
for state in states.values():
    minute_facts(state, 30.0)
    minute_targets(state)
    minute_extras(state)
print(sorted(loaded() - before))
"""
)


@pytest.mark.slow
def test_a_real_update_after_loading_loads_no_other_kernel() -> None:
    # A fresh interpreter: this test process may have loaded every kernel already.
    done = subprocess.run(
        [sys.executable, "-c", _AFTER_LOADING],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


class _IdleUpdater:
    def update_once(self) -> list[object]:
        return []


def test_the_live_loop_loads_the_kernels_once_when_idle_and_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[float] = []
    monkeypatch.setattr(worker, "_load_live_kernels", lambda: loads.append(time.monotonic()))
    monkeypatch.setattr(worker, "warm_live_imports", lambda: None)
    stop = threading.Event()
    compiled_kernels.compiling()
    try:
        loop = threading.Thread(
            target=worker.run_live_loop, args=(_IdleUpdater(), 0.01, stop), daemon=True
        )
        loop.start()
        time.sleep(0.3)
        assert loads == []  # still compiling: the plain implementations serve
    finally:
        compiled_kernels.ready()
    deadline = time.monotonic() + 10
    while not loads and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    stop.set()
    loop.join(timeout=5)
    assert len(loads) == 1
