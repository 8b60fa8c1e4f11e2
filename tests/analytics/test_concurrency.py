"""The histogram + running-sum concurrency series equals counting intervals per second."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.concurrency import minute_concurrency, second_series, work_conserving
from provenance.event_file import EVENT_SCHEMA
from tests.analytics.golden_events import MINUTE0_NS, S

SPANS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 150 * S),  # start, ns after minute 0
        st.integers(0, 40 * S),  # duration
        st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.5, 3.0, 61.25, 200.0])),
    ),
    min_size=1,
    max_size=25,
)


def _events(spans: list[tuple[str, int, int, float | None]]) -> pl.DataFrame:
    rows = [
        {
            "shard_id": shard,
            "start_ns": MINUTE0_NS + start,
            "end_ns": MINUTE0_NS + start + duration,
            "queue_wait_s": wait,
            "span_id": f"{i:016x}",
        }
        for i, (shard, start, duration, wait) in enumerate(spans)
    ]
    return pl.DataFrame(rows).select(
        pl.col(n).cast(t) if n in rows[0] else pl.lit(None, t).alias(n)
        for n, t in EVENT_SCHEMA.items()
    )


def _brute(events: pl.DataFrame, shard: str, second: int) -> tuple[int, int]:
    """(in flight, queue depth) at the instant ``second`` by counting every span."""
    t = second * S
    in_flight = depth = 0
    for row in events.filter(pl.col("shard_id") == shard).iter_rows(named=True):
        in_flight += row["start_ns"] <= t < row["end_ns"]
        wait = row["queue_wait_s"]
        if wait is not None and wait >= 0:
            queued_at = row["start_ns"] - round(wait * S)
            depth += queued_at <= t < row["start_ns"]
    return in_flight, depth


@settings(max_examples=60, deadline=None)
@given(SPANS)
def test_series_match_counting_each_interval(
    spans: list[tuple[str, int, int, float | None]],
) -> None:
    events = _events(spans)
    series = second_series(events)
    assert series.first_second % 60 == 0 and series.in_flight.shape[1] % 60 == 0
    for row, shard in enumerate(series.shard_ids):
        for col in range(0, series.in_flight.shape[1], 7):
            expected = _brute(events, shard, series.first_second + col)
            actual = (int(series.in_flight[row, col]), int(series.queue_depth[row, col]))
            assert actual == expected, (shard, series.first_second + col)
    reporting = set(events.filter(pl.col("queue_wait_s").is_not_null())["shard_id"].to_list())
    assert series.queue_shards == reporting


@settings(max_examples=30, deadline=None)
@given(SPANS)
def test_minute_figures_and_sag_from_the_samples(
    spans: list[tuple[str, int, int, float | None]],
) -> None:
    events = _events(spans)
    series = second_series(events)
    caps = {"a": 2, "b": 1}
    table = minute_concurrency(series, caps)
    samples = pl.DataFrame(
        {
            "shard_id": [s for s in series.shard_ids for _ in range(series.in_flight.shape[1])],
            "second": [
                series.first_second + c
                for _ in series.shard_ids
                for c in range(series.in_flight.shape[1])
            ],
            "in_flight": series.in_flight.ravel().tolist(),
            "queue_depth": series.queue_depth.ravel().tolist(),
        }
    ).with_columns(minute_ns=pl.col("second") // 60 * 60 * S)
    expected = samples.group_by("shard_id", "minute_ns").agg(
        in_flight_mean=pl.col("in_flight").mean(), in_flight_max=pl.col("in_flight").max()
    )
    got = table.join(expected, on=["shard_id", "minute_ns"], how="inner", suffix="_x")
    assert got.height == expected.height
    assert (got["in_flight_mean"] == got["in_flight_mean_x"]).all()
    assert (got["in_flight_max"] == got["in_flight_max_x"]).all()
    caps_of = (
        table.filter(pl.col("shard_id").is_in(["a", "b", "c", "*"]))
        .select("shard_id", "concurrency_cap")
        .unique()
    )
    for shard, cap in caps_of.iter_rows():
        assert cap == {"a": 2, "b": 1, "*": 3}.get(shard)
    queued = samples.filter(
        pl.col("shard_id").is_in([s for s in caps if s in series.queue_shards])
        & (pl.col("queue_depth") > 0)
    ).with_columns(cap=pl.col("shard_id").replace_strict(caps, return_dtype=pl.Float64))
    result = work_conserving(series, caps)
    if any(s in series.queue_shards for s in caps):
        assert result["seconds_with_queue"] == queued.height
        sag = queued.filter(pl.col("in_flight") < 0.9 * pl.col("cap")).height
        assert result["sag_share"] == (sag / queued.height if queued.height else None)
    else:
        assert result["sag_share"] is None and result["seconds_with_queue"] is None
