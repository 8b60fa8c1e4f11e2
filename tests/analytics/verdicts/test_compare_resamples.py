"""Bootstrap indices drawn a batch at a time give exactly the intervals drawn whole."""

from __future__ import annotations

import numpy as np
import pytest

from tpmledger.analytics.verdicts import compare_runs
from tpmledger.analytics.verdicts.compare_runs import CompareParams, RunMinutes, compare


def _run(run_id: str, minutes: int, seed: int) -> RunMinutes:
    rng = np.random.default_rng(seed)
    calls = rng.integers(1, 50, minutes).astype(np.float64)
    cols = {
        "calls_in_minute": calls,
        "tpm_total": rng.integers(0, 10_000, minutes).astype(np.float64),
        "completion_tpm_out": rng.integers(0, 5_000, minutes).astype(np.float64),
        "ttft_p95_s": rng.random(minutes),
        "retries": np.floor(calls * rng.random(minutes) / 4),
        "stalls": np.floor(calls * rng.random(minutes) / 8),
        "calls_final": calls,
        "calls_ok": np.floor(calls * 0.9),
    }
    labels = [f"m{i}" for i in range(minutes)]
    return RunMinutes(run_id, 1, "00" * 32, labels, cols)  # type: ignore[arg-type]


@pytest.mark.parametrize(("minutes_a", "minutes_b"), [(41, 57), (300, 301), (7, 1_000)])
def test_batched_resamples_equal_one_draw(
    monkeypatch: pytest.MonkeyPatch, minutes_a: int, minutes_b: int
) -> None:
    a, b = _run("a", minutes_a, 1), _run("b", minutes_b, 2)
    params = CompareParams(resamples=500)
    whole = compare(a, b, params)  # every index fits: drawn once, as before batching
    monkeypatch.setattr(compare_runs, "RESAMPLE_CELLS", 3 * max(minutes_a, minutes_b) + 1)
    batched = compare(a, b, params)  # 3 rows at a time
    assert batched == whole
    assert whole["figures"]["sustained_tpm_total"]["interval"] is not None
