"""The live updater settles probed flags without copying the window (issue 29 item 3)."""

from __future__ import annotations

import polars as pl

from tpmledger.analytics.live.live_updater import _FLAGS, _KEYS, _settle_flags


def _window(n: int) -> pl.DataFrame:
    flags = {
        f: [None if i % 3 == 0 else (i + k) % 2 for i in range(n)] for k, f in enumerate(_FLAGS)
    }
    return pl.DataFrame(
        {
            "trace_id": [f"{i:032x}" for i in range(n)],
            "span_id": [f"{i * 7:016x}" for i in range(n)],
            "end_ns": list(range(n)),
            **flags,
        },
        schema_overrides={f: pl.Int64 for f in _FLAGS},
    )


def test_settled_flags_equal_an_update_of_the_whole_window() -> None:
    window = _window(50)
    missing = window.with_row_index("_row").filter(pl.col("rollup").is_null())
    # The probe answers for most missing attempts (Int32, as the database gives), with a
    # null flag now and then (an update keeps the old value then).
    probed = (
        missing.select(_KEYS)
        .filter(pl.int_range(pl.len()) % 5 != 1)
        .with_columns(
            rollup=pl.lit(0, pl.Int32),
            later_in_call=(pl.int_range(pl.len()) % 2).cast(pl.Int32),
            has_later=pl.when(pl.int_range(pl.len()) % 4 == 0)
            .then(None)
            .otherwise(1)
            .cast(pl.Int32),
        )
    )
    settled = _settle_flags(window, missing, probed)
    expected = window.update(probed, on=_KEYS, how="left")
    assert settled.schema == expected.schema
    assert settled.equals(expected)
    assert settled["rollup"].null_count() == missing.height - probed.height


def test_nothing_probed_leaves_the_window_as_it_was() -> None:
    window = _window(10)
    missing = window.with_row_index("_row").filter(pl.col("rollup").is_null())
    probed = (
        missing.select(_KEYS).head(0).with_columns(pl.lit(None, pl.Int32).alias(f) for f in _FLAGS)
    )
    assert _settle_flags(window, missing, probed).equals(window)
