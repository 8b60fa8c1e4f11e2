"""Human output: compact numbers, the progress line, the summary block, the sweep table."""

from __future__ import annotations

from tpmledger.simulator.counters import ShardCounters
from tpmledger.simulator.fleet import FleetConfig, FleetResult
from tpmledger.simulator.progress import compact, progress_line, summary_text, sweep_table


def _result(cap: int, **counters: object) -> FleetResult:
    config = FleetConfig(run_id=f"r_cap{cap}", sweep_id="r", concurrency=cap, otlp_endpoint="x")
    result = FleetResult(config=config, shards={0: ShardCounters(**counters)})  # type: ignore[arg-type]
    result.complete.add(0)
    return result


def test_compact() -> None:
    assert [compact(x) for x in (0, 999, 12_345, 1_234_567)] == ["0", "999", "12.3k", "1.23M"]
    assert compact(None) == "not measured"


def test_progress_line_names_every_figure() -> None:
    line = progress_line("run", 25.2, ShardCounters(
        calls_ok=10, calls_started=12, prompt_tokens=4_000, completion_tokens=2_500,
        attempts_failed=3, rate_limited=2, retries=3, spans_exported=11, spans_ended=13,
    ))  # fmt: skip
    assert line == (
        "[run    25s] calls 10 ok / 12 | tokens prompt 4.0k completion 2.5k | errors 3 "
        "(429: 2) | retries 3 | spans exported 11/13"
    )


def test_summary_and_sweep_table() -> None:
    low = _result(4, attempts=10, attempts_ok=10, calls_started=10, calls_ok=10,
                  prompt_tokens=600, completion_tokens=300, spans_ended=10, spans_exported=10,
                  elapsed_s=60.0)  # fmt: skip
    text = summary_text(low.summary())
    assert "run r_cap4 (sweep r): 8 shards x cap 4, 60 s" in text
    assert "tokens: prompt 600, completion 300, total 900" in text
    assert "429 0.0%" in text and "10 exported" in text
    idle = _result(8).summary()  # nothing happened: rates are not measured, not 0
    assert "call success not measured" in summary_text(idle)
    table = sweep_table([low.summary(), idle]).splitlines()
    assert table[1].split() == ["4", "900", "0.0%", "0.0%", "100.0%"]
    assert table[2].split()[:2] == ["8", "not"]
