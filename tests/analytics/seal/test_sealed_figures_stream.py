"""SealedFiguresStream: chunk after chunk, the sealed figures of the whole run's events.

Runs are built as canonical event frames (no database). Times and limits are whole
quarter seconds, often meeting a limit exactly: a float sum taken chunk by chunk may differ
from the whole run's in its last bits, which the published 12-digit rounding absorbs (these
sums lie far from a rounding boundary), but whether a limit is met must not differ at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analytics.golden_events import MINUTE0_NS
from tpmledger.analytics.kernels.event_plans import explicit_call_ids
from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.analytics.seal.sealed_figures import SealedFigures
from tpmledger.analytics.seal.sealed_figures_stream import SealedFiguresStream, sealed_params
from tpmledger.analytics.verdicts import run_diagnostics
from tpmledger.analytics.verdicts.goodput import compute_goodput
from tpmledger.analytics.verdicts.minute_outcomes import minute_outcomes
from tpmledger.analytics.verdicts.run_diagnostics import (
    AttemptLookup,
    deadline_overrun,
    retry_storm,
    slot_held_by_tool,
    target_saturation,
)
from tpmledger.provenance.event_schema import EVENT_COLUMNS, EVENT_SCHEMA, ORDER_COLUMNS
from tpmledger.slo import Slo
from tpmledger.storage.readers.pitfall_attributes import Declarations, Target

QUARTER_NS = 250_000_000
MINUTE_NS = 60_000_000_000
TRACES = [f"{t:032x}" for t in range(1, 5)]
TARGETS: list[Target] = [
    ("openai", "gpt-a"),
    ("azure", "gpt-a"),
    ("openai", "gpt-b"),
    (None, "gpt-a"),
]
LIMITS = [0.5, 2.25, 10.0, 30.75]  # declared deadlines and timeouts, seconds
SLOS = [None, Slo(ttft_s=0.5, latency_s=10.0), Slo(latency_s=30.0), Slo(ttft_s=1.0)]
WHOLE_MINUTES = pl.DataFrame(
    {
        "minute_ns": [MINUTE0_NS, MINUTE0_NS + MINUTE_NS],
        "calls_in_minute": [5, 4],
        "retries": [0, 3],
    }
)


@dataclass
class Run:
    """A run's canonical events and what it declares beside them."""

    events: pl.DataFrame
    declared: Declarations = field(default_factory=Declarations)
    tools: list[tuple[str, int, int]] = field(default_factory=list)
    targets: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)


def event(
    n: int,
    *,
    start_q: int,
    end_q: int,
    call: str | None = None,
    trace: str = TRACES[0],
    status: str = "ok",
    error: str | None = None,
    ttft: float | None = 0.25,
    model: str = "gpt-a",
    tokens: tuple[int | None, int | None] = (100, 50),
) -> dict[str, Any]:
    """One canonical event; times in quarter seconds after minute 0, span id from ``n``."""
    span = f"{n:016x}"
    return {
        "call_id": call or span,
        "completion_tokens": tokens[1],
        "end_ns": MINUTE0_NS + end_q * QUARTER_NS,
        "error_type": error,
        "http_status": 200 if status == "ok" else 500,
        "model": model,
        "prompt_tokens": tokens[0],
        "queue_wait_s": None,
        "resend_count": None,
        "run_id": "stream",
        "shard_id": "0",
        "span_id": span,
        "start_ns": MINUTE0_NS + start_q * QUARTER_NS,
        "status": status,
        "trace_id": trace,
        "ttft_s": ttft,
    }


def canonical(records: Sequence[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(list(records), schema=EVENT_SCHEMA).sort(ORDER_COLUMNS)


def call_order(events: pl.DataFrame) -> pl.DataFrame:
    """Each attempt's place in its logical call over the whole run (SealChunk's contract)."""
    place = pl.int_range(pl.len()).over("call_id")
    return events.sort("call_id", "start_ns", "end_ns", "span_id").select(
        "trace_id",
        "span_id",
        call_position=place,
        call_last=place == pl.len().over("call_id") - 1,
    )


def split(events: pl.DataFrame, cuts: Sequence[int]) -> list[SealChunk]:
    """Chunks of whole minutes from the first end minute to the last, cut before the
    minutes ``cuts`` (offsets from the first); no chunk for a run without events."""
    if events.height == 0:
        return []
    end = events.get_column("end_ns")
    first = int(end.min()) // MINUTE_NS * MINUTE_NS  # type: ignore[arg-type]
    after = int(end.max()) // MINUTE_NS * MINUTE_NS + MINUTE_NS  # type: ignore[arg-type]
    reach_ns = int((end - events.get_column("start_ns")).max())  # type: ignore[arg-type]
    bounds = sorted(
        {first, after, *(first + c * MINUTE_NS for c in cuts if first + c * MINUTE_NS < after)}
    )
    order = call_order(events)
    chunks = []
    for low, high in itertools.pairwise(bounds):
        rows = events.filter(pl.col("end_ns").is_between(low, high, closed="left")).join(
            order, on=["trace_id", "span_id"], how="left", maintain_order="left"
        )
        reach = events.filter(pl.col("end_ns").is_between(high, high + reach_ns, closed="left"))
        chunks.append(
            SealChunk(
                low,
                high,
                rows.select(EVENT_COLUMNS),
                reach,
                rows.get_column("call_position").to_numpy().astype(np.int64),
                rows.get_column("call_last").to_numpy().astype(np.bool_),
            )
        )
    return chunks


def streamed(
    run: Run,
    chunks: Sequence[SealChunk],
    slo: Slo | None,
    *,
    explicit: bool | None = None,
) -> SealedFigures:
    stream = SealedFiguresStream.from_inputs(run.declared, run.tools, run.targets, slo)
    for chunk in chunks:
        stream.add(chunk)
    explicit = explicit_call_ids(run.events) if explicit is None else explicit
    return stream.finish(WHOLE_MINUTES, {"passes": True}, explicit)


def assert_whole_run_figures(run: Run, figures: SealedFigures, slo: Slo | None) -> None:
    """``figures`` are those of the whole-run functions on ``run.events``."""
    events = run.events
    assert figures.diagnostics == {
        "retry_storm": retry_storm(WHOLE_MINUTES),
        "deadline_overrun": deadline_overrun(events, run.declared),
        "slot_held_by_tool": slot_held_by_tool(events, run.tools),
        "target_saturation": target_saturation(events, run.declared.target_caps, run.targets),
        "work_conserving": {"passes": True},
    }
    assert figures.minute_outcomes == minute_outcomes(
        events, explicit_call_ids=explicit_call_ids(events)
    )
    assert figures.goodput == ({} if slo is None else {slo.text: compute_goodput(events, slo)})
    assert figures.params == sealed_params()


@st.composite
def runs(draw: st.DrawFn) -> Run:
    """Up to 30 attempts over 6 minutes, with deadlines, timeouts, tools and target caps
    declared at random (and declarations and target rows of attempts not in the events,
    as rollups have)."""
    explicit = draw(st.booleans())
    count = draw(st.integers(0, 30))
    records = []
    for n in range(1, count + 1):
        # Minutes 2 and 4 stay empty; durations often meet a limit of SLOS or LIMITS exactly.
        end_q = draw(st.sampled_from([0, 0, 1, 3, 5])) * 240 + draw(st.integers(0, 239))
        held_q = draw(st.one_of(st.sampled_from([0, 2, 9, 40, 120, 123]), st.integers(0, 480)))
        stall = draw(st.sampled_from([None, None, "timeout", "http_504", "rate_limit"]))
        records.append(
            event(
                n,
                start_q=end_q - held_q,
                end_q=end_q,
                call=f"call-{draw(st.integers(0, 8))}" if explicit else None,
                trace=draw(st.sampled_from(TRACES)),
                status="ok" if stall is None and draw(st.booleans()) else "error",
                error=stall,
                ttft=draw(st.sampled_from([None, 0.25, 0.75, 2.0])),
                model=draw(st.sampled_from(["gpt-a", "gpt-b", "gpt-c"])),
                tokens=(draw(st.sampled_from([None, 10, 300])), draw(st.integers(0, 500))),
            )
        )
    events = canonical(records)
    keys = [(r["trace_id"], r["span_id"]) for r in records] + [(TRACES[0], "f" * 16)]
    limits = st.sampled_from(LIMITS)
    declared = Declarations(
        deadlines={k: draw(limits) for k in keys if draw(st.integers(0, 3)) == 0},
        timeouts={k: draw(limits) for k in keys if draw(st.integers(0, 4)) == 0},
        target_caps={t: draw(st.integers(1, 3)) for t in TARGETS if draw(st.booleans())},
    )
    capped = {model for _, model in declared.target_caps}
    targets = [
        (r["trace_id"], r["span_id"], draw(st.sampled_from(["openai", "azure", None])), r["model"])
        for r in [*records, {"trace_id": TRACES[1], "span_id": "e" * 16, "model": "gpt-a"}]
        if r["model"] in capped
    ]
    tools = [
        (
            draw(st.sampled_from([*TRACES, "9" * 32])),
            MINUTE0_NS + (start := draw(st.integers(-480, 6 * 240))) * QUARTER_NS,
            MINUTE0_NS + (start + draw(st.sampled_from([0, 4, 40, 900]))) * QUARTER_NS,
        )
        for _ in range(draw(st.integers(0, 6)))
    ]
    return Run(events, declared, tools, targets)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    run=runs(),
    cuts=st.lists(st.integers(1, 6), max_size=6),
    slo=st.sampled_from(SLOS),
)
@pytest.mark.slow
def test_chunk_by_chunk_the_figures_equal_the_whole_runs(
    run: Run, cuts: list[int], slo: Slo | None
) -> None:
    assert_whole_run_figures(run, streamed(run, split(run.events, cuts), slo), slo)


def test_a_call_whose_attempts_fall_in_different_chunks_is_counted_where_it_ended() -> None:
    # call-1 stalls in minute 0 and is retried in minute 2; minute 1 has no event.
    run = Run(
        canonical(
            [
                event(1, start_q=0, end_q=40, call="call-1", status="error", error="timeout"),
                event(2, start_q=400, end_q=500, call="call-1"),
                event(3, start_q=200, end_q=230, call="call-2"),
            ]
        )
    )
    chunks = split(run.events, [1, 2])
    assert [c.events.height for c in chunks] == [2, 0, 1]
    assert chunks[0].call_last.tolist() == [False, True] and chunks[2].call_last.tolist() == [True]
    figures = streamed(run, chunks, Slo(latency_s=30.0))
    assert figures.minute_outcomes["stalls"] == [1, 0, 0]
    assert figures.minute_outcomes["calls_final"] == [1, 0, 1]
    assert figures.minute_outcomes["calls_ok"] == [1, 0, 1]
    assert_whole_run_figures(run, figures, Slo(latency_s=30.0))


def test_a_chunk_of_one_attempt_meets_a_limit_as_the_whole_run_does() -> None:
    # Held exactly latency=30 and exactly the 30.75 s deadline. Polars divides a column by
    # 1e9 as a product with the reciprocal (30.000000000000004 here) but a lone value
    # exactly (30.0): the minute-1 chunk holding attempt 3 alone must decide as the run does.
    run = Run(
        canonical(
            [
                event(1, start_q=0, end_q=4),
                event(2, start_q=4, end_q=8),
                event(3, start_q=120, end_q=240),
                event(4, start_q=357, end_q=480),
            ]
        ),
        Declarations({(TRACES[0], f"{n:016x}"): 30.75 for n in (1, 2, 3, 4)}),
    )
    slo = Slo(latency_s=30.0)
    chunks = split(run.events, [1, 2])
    assert [c.events.height for c in chunks] == [2, 1, 1]
    assert_whole_run_figures(run, streamed(run, chunks, slo), slo)
    alone = canonical(run.events.slice(2, 1).to_dicts())
    assert_whole_run_figures(
        Run(alone, run.declared), streamed(Run(alone, run.declared), split(alone, []), slo), slo
    )


def test_without_explicit_call_ids_every_attempt_is_final() -> None:
    run = Run(
        canonical(
            [
                event(1, start_q=0, end_q=40, status="error", error="http_504"),
                event(2, start_q=10, end_q=300),
                event(3, start_q=200, end_q=260),
            ]
        )
    )
    chunks = [
        SealChunk(c.low_ns, c.high_ns, c.events, c.reach, c.call_position, c.call_last & False)
        for c in split(run.events, [1])
    ]
    figures = streamed(run, chunks, None, explicit=False)
    assert figures.minute_outcomes["calls_final"] == [1, 2]
    assert figures.minute_outcomes["calls_ok"] == [0, 2]
    assert_whole_run_figures(run, figures, None)


def test_without_declarations_tools_or_caps_the_diagnostics_are_not_measured() -> None:
    run = Run(canonical([event(1, start_q=0, end_q=40), event(2, start_q=300, end_q=800)]))
    figures = streamed(run, split(run.events, [1]), None)
    for name in ("deadline_overrun", "slot_held_by_tool", "target_saturation"):
        assert figures.diagnostics[name] is None
    assert_whole_run_figures(run, figures, None)


@pytest.mark.parametrize("chunks", [0, 1], ids=["no chunk", "an empty chunk"])
def test_a_run_without_attempts(chunks: int) -> None:
    events = canonical([])
    run = Run(
        events,
        Declarations({(TRACES[0], "1" * 16): 1.0}, {}, {("openai", "gpt-a"): 2}),
        [(TRACES[0], MINUTE0_NS, MINUTE0_NS + MINUTE_NS)],
        [(TRACES[0], "1" * 16, "openai", "gpt-a")],
    )
    empty = SealChunk(
        MINUTE0_NS,
        MINUTE0_NS + MINUTE_NS,
        events,
        events,
        np.zeros(0, np.int64),
        np.zeros(0, np.bool_),
    )
    slo = Slo(ttft_s=0.5)
    figures = streamed(run, [empty] * chunks, slo)
    assert figures.minute_outcomes["minute_utc"] == []
    assert figures.goodput[slo.text]["not_measured_because"] == "the run has no attempts"
    assert figures.diagnostics["deadline_overrun"] is None
    assert_whole_run_figures(run, figures, slo)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs(), cuts=st.lists(st.integers(1, 6), max_size=6))
def test_attempts_whose_key_hashes_collide_are_still_found(run: Run, cuts: list[int]) -> None:
    # Every key the same hash: every lookup of two keys or more goes through the join.
    with mock.patch.object(run_diagnostics, "_key_hash", lambda: pl.lit(7, dtype=pl.UInt64)):
        figures = streamed(run, split(run.events, cuts), None)
        lookup = AttemptLookup([(TRACES[0], "1" * 16)], {"v": pl.Series([1.5])})
        found = lookup.find(run.events)
    assert figures.diagnostics["deadline_overrun"] == deadline_overrun(run.events, run.declared)
    assert figures.diagnostics["target_saturation"] == target_saturation(
        run.events, run.declared.target_caps, run.targets
    )
    expected = (run.events.get_column("trace_id") == TRACES[0]) & (
        run.events.get_column("span_id") == "1" * 16
    )
    assert found.get_column("found").to_list() == expected.to_list()
    assert found.get_column("v").to_list() == [1.5 if e else None for e in expected]
