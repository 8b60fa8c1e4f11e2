"""Repeated call ids are found by one sort; the last attempt decides a call's outcome."""

from __future__ import annotations

import numpy as np
import polars as pl

from tests.analytics.oracle.whole_run import count_logical_calls
from tpmledger.analytics.kernels.logical_calls import repeated


def test_repeated_flags_every_occurrence_of_a_value_seen_twice() -> None:
    values = np.array([5, 1, 9, 5, 7, 9, 9], dtype=np.uint64)
    assert repeated(values).tolist() == [True, False, True, True, False, True, True]
    assert not repeated(np.array([3, 2, 1], dtype=np.uint64)).any()


def test_last_attempt_by_start_end_span_decides_and_retried_failures_are_causes() -> None:
    attempts = pl.DataFrame(
        {
            "call_id": ["c1", "c1", "c1", "c2", "c3", "c3"],
            "start_ns": [30, 10, 20, 5, 7, 7],
            "end_ns": [40, 15, 25, 9, 9, 9],
            "span_id": ["s3", "s1", "s2", "s4", "s6", "s5"],
            "trace_id": ["t"] * 6,
            "error_type": [None, "rate_limit", None, "timeout", "boom", None],
        }
    )
    ok = np.array([True, False, False, False, False, True])
    calls, ok_calls, causes = count_logical_calls(attempts, ok, explicit=True, measured=True)
    # c1 ends ok (s3 is last); c2 failed alone; c3's last by span id is s6 (failed).
    assert (calls, ok_calls) == (3, 1)
    # Retried failures: c1's s1 (rate_limit) and s2 (no type -> "error"); c3's s5 was ok.
    assert causes == {"error": 1, "rate_limit": 1}


def test_attempts_that_share_start_end_and_span_id_are_ordered_by_trace_id() -> None:
    # Two attempts of one call, identical but for the trace: the larger trace id is last,
    # as the event file's order (end, trace id, span id) makes it for an offline verifier.
    attempts = pl.DataFrame(
        {
            "call_id": ["c", "c"],
            "start_ns": [1, 1],
            "end_ns": [2, 2],
            "span_id": ["s", "s"],
            "trace_id": ["b", "a"],
            "error_type": [None, "boom"],
        }
    )
    calls, ok_calls, causes = count_logical_calls(
        attempts, np.array([True, False]), explicit=True, measured=True
    )
    assert (calls, ok_calls, causes) == (1, 1, {"boom": 1})
