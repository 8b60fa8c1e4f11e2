"""A minute's rates: two implementations held equal bit for bit
(docs/architecture.md#one-formula).

``rate_columns`` (registered ``minute_rates``) is a Polars column expression: the seal and the
live updater add a minute table's retry and success rates in the Polars plan that builds the
table, thousands of rows at once. ``ratio`` (registered ``ratio``) is plain Python: the run
object's rates and ``/metrics``' newest-minute retry rate, where the read API's process
holds a few numbers and no frame. Calling one from the other would cost a Python call per
row in the seal or a frame per number on the read side, so instead they are proven to give
the same value, to the bit, for every count a minute can hold (below 2**53, where Polars'
cast to float64 before dividing is exact, as Python's int division is).
"""

from __future__ import annotations

import struct

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tpmledger.analytics.kernels.event_plans import rate_columns
from tpmledger.analytics.kernels.run_level import ratio

COUNT = st.integers(0, 2**53)
MINUTES = st.lists(
    st.tuples(COUNT, COUNT, st.one_of(st.none(), COUNT)),  # calls, successes, retries
    min_size=1,
    max_size=40,
)


def _bits(value: float | None) -> bytes | None:
    return None if value is None else struct.pack("<d", value)


@settings(max_examples=300, deadline=None)
@given(MINUTES)
def test_the_column_rates_are_the_scalar_ratio_to_the_bit(
    minutes: list[tuple[int, int, int | None]],
) -> None:
    table = pl.DataFrame(
        minutes,
        schema={"calls_in_minute": pl.Int64, "successes": pl.Int64, "retries": pl.Int64},
        orient="row",
    ).with_columns(rate_columns())
    for calls, successes, retries, retry_rate, success_rate in table.iter_rows():
        assert _bits(retry_rate) == _bits(ratio(retries, calls)), (calls, retries)
        assert _bits(success_rate) == _bits(ratio(successes, calls)), (calls, successes)
