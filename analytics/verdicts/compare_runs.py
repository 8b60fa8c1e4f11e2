"""Compare two runs: figures with bootstrap intervals and a verdict (docs/metrics.md#compare).

Seed rule: "If throughput rises but retries and connection stalls rise faster, you did not
improve the system; you moved the bottleneck."

For A (baseline) and B (candidate), over each run's minutes strictly between its first and
last (from the stored minute rows of the newest sealed version, never from spans): sustained
TPM (total and completion: medians of the minutes), retry rate, stall rate (attempts failed
by timeout or cancelled), call success rate (ratios of the minutes' sums), TTFT p95 (median
of the minutes' p95) and, with an SLO, goodput. The difference B − A gets a 95 % percentile
bootstrap interval: minutes are resampled with replacement, independently per run (the same
resample for every figure of a run), ``resamples`` times from a seeded generator, so a
result is reproducible. "Rises beyond its interval" means the whole interval is above 0.

Verdicts (rules checked in this order; parameters are printed with every result):

- ``inconclusive`` when a needed figure (throughput, retry rate, stall rate, call success,
  and goodput when an SLO is declared) is not measured; the result names it and why;
- ``improved``: throughput rises beyond its interval, neither retry nor stall rate rises
  beyond its interval, call success does not fall beyond its interval (and goodput does
  not fall beyond its interval: a throughput gain with falling goodput is no improvement);
- ``moved_the_bottleneck``: throughput rises, but retry or stall rate rises beyond its
  interval by more, relatively, than throughput rose;
- ``regressed``: throughput falls beyond its interval, or call success falls beyond its
  interval with no throughput gain beyond its interval;
- ``inconclusive`` otherwise.
"""

from __future__ import annotations

import math
import shlex
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from tpmledger.storage.codecs.time_text import minute_text
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.readers.snapshots_read import latest_snapshot, minute_rows
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.writers.sealed_figures_store import (
    read_diagnostics,
    read_goodput,
    run_exists,
)

Floats = npt.NDArray[np.float64]

THROUGHPUT: Final = "sustained_tpm_total"
NEEDED: Final = (THROUGHPUT, "retry_rate", "stall_rate", "call_success_rate")
SLO_NEEDED: Final = ("goodput_tpm_total",)


class NotComparable(ValueError):
    """A run that cannot be compared yet (never sealed); the message says what to do."""


@dataclass(frozen=True)
class CompareParams:
    """Bootstrap parameters, printed with every result."""

    resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95
    min_minutes: int = 3

    def as_dict(self) -> dict[str, Any]:
        return {
            "resamples": self.resamples,
            "seed": self.seed,
            "confidence": self.confidence,
            "min_minutes": self.min_minutes,
            "interval": "percentile bootstrap of B - A; minutes strictly between each run's "
            "first and last, resampled with replacement, independently per run",
            "rises_beyond_interval": "the whole interval is above 0",
            "statistics": {
                "sustained_tpm_total": "median of tpm_total",
                "sustained_completion_tpm": "median of completion_tpm_out",
                "retry_rate": "sum(retries) / sum(calls_in_minute)",
                "stall_rate": "sum(stalls) / sum(calls_in_minute)",
                "call_success_rate": "sum(calls_ok) / sum(calls_final)",
                "ttft_p95_s": "median of ttft_p95_s",
                "goodput_tpm_total": "median of goodput_tpm_total",
                "good_call_share": "sum(good_calls) / sum(calls)",
            },
        }


@dataclass
class RunMinutes:
    """One run's stored minutes, as compare reads them (every minute, first to last)."""

    run_id: str
    version: int
    seal: str
    minute_utc: list[str]
    columns: dict[str, Floats | None]
    why_missing: dict[str, str] = field(default_factory=dict)
    # Per minute: still open when this version was sealed (a version sealed while data
    # arrived, e.g. `tpmledger analyze` of a running run); drawn in progress.
    open_at_seal: list[bool] = field(default_factory=list)
    # The version's own bottleneck verdict (docs/metrics.md#bottleneck); None when sealed
    # before verdicts existed.
    bottleneck: dict[str, Any] | None = None

    @property
    def inner(self) -> slice:
        """The minutes strictly between the first and the last."""
        return slice(1, max(len(self.minute_utc) - 1, 1))

    @property
    def inner_count(self) -> int:
        return max(len(self.minute_utc) - 2, 0)


def _array(values: list[Any]) -> Floats:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _aligned(stored: dict[str, Any], minutes: list[str], key: str) -> Floats | None:
    """A stored per-minute column re-indexed onto ``minutes`` (absent minutes = 0)."""
    by_minute = dict(zip(stored["minute_utc"], stored[key], strict=True))
    return _array([by_minute.get(m, 0) for m in minutes])


def load_run_minutes(
    session: Session, run_id: str, slo_text: str | None = None, *, close_after_s: float = 120.0
) -> RunMinutes:
    """The newest sealed version's whole-run minutes, outcomes and goodput of ``run_id``
    (``close_after_s``: TPMLEDGER_MINUTE_CLOSE_AFTER_S, for minutes open at seal time)."""
    snapshot = latest_snapshot(session, run_id)
    if snapshot is None:
        if not run_exists(session, run_id):
            raise UnknownRun(run_id)
        raise NotComparable(
            f"run {run_id!r} has no sealed version yet; compare reads sealed minutes "
            f"(wait for the analytics worker, or run `tpmledger analyze {shlex.quote(run_id)}`)"
        )
    rows = minute_rows(session, run_id, snapshot.version, WHOLE_RUN)
    minutes = [minute_text(r["minute_utc"]) for r in rows]
    cols: dict[str, Floats | None] = {
        name: _array([r[name] for r in rows])
        for name in ("calls_in_minute", "tpm_total", "completion_tpm_out", "ttft_p95_s")
    }
    run = RunMinutes(run_id, snapshot.version, snapshot.seal, minutes, cols)
    own = (snapshot.metrics or {}).get("bottleneck")
    run.bottleneck = dict(own) if isinstance(own, dict) else None
    if not snapshot.final:
        closes = timedelta(minutes=1, seconds=close_after_s)
        run.open_at_seal = [r["minute_utc"] + closes > snapshot.data_as_of for r in rows]
    retries = [r["retries"] for r in rows]
    cols["retries"] = None if any(v is None for v in retries) else _array(retries)
    if cols["retries"] is None:
        run.why_missing["retry_rate"] = (
            f"retries of run {run_id!r} are not measured (no attempt carries "
            "http.request.resend_count or tpmledger.call.id)"
        )
    stored = read_diagnostics(session, run_id, snapshot.version)
    for key in ("stalls", "calls_final", "calls_ok"):
        cols[key] = _aligned(stored.minute_outcomes, minutes, key) if stored else None
    if stored is None:
        why = (
            f"version {snapshot.version} of run {run_id!r} was sealed before stalls and call "
            f"outcomes were stored; run `tpmledger analyze {shlex.quote(run_id)}`"
        )
        run.why_missing["stall_rate"] = run.why_missing["call_success_rate"] = why
    if slo_text is not None:
        _load_goodput(session, run, slo_text)
    return run


def _load_goodput(session: Session, run: RunMinutes, slo_text: str) -> None:
    figures = read_goodput(session, run.run_id, run.version, slo_text)
    if figures is None or figures.get("good_call_share") is None:
        why = (figures or {}).get(
            "not_measured_because"
        ) or f"goodput under {slo_text} was not computed for version {run.version}"
        if figures is None:
            why += f"; run `tpmledger compare` with --slo {slo_text} or `tpmledger analyze`"
        run.why_missing["goodput_tpm_total"] = f"run {run.run_id!r}: {why}"
        run.why_missing["good_call_share"] = run.why_missing["goodput_tpm_total"]
        run.columns["goodput_tpm_total"] = run.columns["good_calls"] = None
        run.columns["goodput_calls"] = None
        return
    stored = {k: [m[k] for m in figures["minutes"]] for k in figures["minutes"][0]}
    for key, name in (
        ("goodput_tpm_total", "goodput_tpm_total"),
        ("good_calls", "good_calls"),
        ("calls", "goodput_calls"),
    ):
        run.columns[name] = _aligned(stored, run.minute_utc, key)


# A statistic: (columns, resample indices of shape (R, n)) -> R values.
Statistic = Callable[[dict[str, Floats], npt.NDArray[np.int64]], Floats]


def _median(column: str) -> Statistic:
    return lambda c, idx: np.median(c[column][idx], axis=1)


def _nanmedian(column: str) -> Statistic:
    def stat(c: dict[str, Floats], idx: npt.NDArray[np.int64]) -> Floats:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a resample of only nulls
            return np.asarray(np.nanmedian(c[column][idx], axis=1), dtype=np.float64)

    return stat


def _ratio(numerator: str, denominator: str) -> Statistic:
    def stat(c: dict[str, Floats], idx: npt.NDArray[np.int64]) -> Floats:
        top, bottom = c[numerator][idx].sum(axis=1), c[denominator][idx].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1), np.nan)

    return stat


# figure -> (statistic, columns it needs)
FIGURES: Final[dict[str, tuple[Statistic, tuple[str, ...]]]] = {
    "sustained_tpm_total": (_median("tpm_total"), ("tpm_total",)),
    "sustained_completion_tpm": (_median("completion_tpm_out"), ("completion_tpm_out",)),
    "retry_rate": (_ratio("retries", "calls_in_minute"), ("retries", "calls_in_minute")),
    "stall_rate": (_ratio("stalls", "calls_in_minute"), ("stalls", "calls_in_minute")),
    "call_success_rate": (_ratio("calls_ok", "calls_final"), ("calls_ok", "calls_final")),
    "ttft_p95_s": (_nanmedian("ttft_p95_s"), ("ttft_p95_s",)),
    "goodput_tpm_total": (_median("goodput_tpm_total"), ("goodput_tpm_total",)),
    "good_call_share": (_ratio("good_calls", "goodput_calls"), ("good_calls", "goodput_calls")),
}
SLO_FIGURES: Final = ("goodput_tpm_total", "good_call_share")


#: Resample indices held at once per run (rows × minutes): 2000 resamples of a 30-day run
#: drawn whole were 2000 × 43,000 indices, 690 MB per run, before any figure gathered them.
RESAMPLE_CELLS: Final = 1 << 21


class Resamples:
    """One run's ``(resamples, n)`` bootstrap indices, drawn a batch of rows at a time.

    The batches (``rows`` rows each, the same for both runs of a comparison) are the rows
    of one ``integers(0, n, size=(resamples, n))`` draw from the generator state given, in
    order (NumPy's bounded integers consume the stream element
    by element, so drawing the rows in batches yields the same values; a test holds it),
    and every figure is computed row by row, so its bootstrap values are unchanged while
    memory follows :data:`RESAMPLE_CELLS`, not the run's minutes. Indices that fit are
    drawn once and kept.
    """

    def __init__(self, rng: np.random.Generator, n: int, count: int, rows: int) -> None:
        self._state = rng.bit_generator.state
        self.n, self.count, self._rows = n, count, max(rows, 1)
        self._kept: npt.NDArray[np.int64] | None = None
        for batch in self._draw():  # moves ``rng`` past these draws; keeps them if they fit
            self._kept = batch if self._rows >= count else None
        rng.bit_generator.state = self._end_state

    def _draw(self) -> Iterator[npt.NDArray[np.int64]]:
        rng = np.random.default_rng(0)
        rng.bit_generator.state = self._state
        for start in range(0, self.count, self._rows):
            rows = min(self._rows, self.count - start)
            yield rng.integers(0, max(self.n, 1), size=(rows, self.n))
        self._end_state = rng.bit_generator.state

    def batches(self) -> Iterator[npt.NDArray[np.int64]]:
        """The index rows, in order, a batch at a time."""
        if self._kept is not None:
            yield self._kept
            return
        yield from self._draw()


def _value(x: float) -> float | None:
    return None if math.isnan(x) else float(f"{x:.12g}")


def _figure(
    name: str,
    a: RunMinutes,
    b: RunMinutes,
    idx_a: Resamples,
    idx_b: Resamples,
    params: CompareParams,
) -> tuple[dict[str, Any], str | None]:
    """(figure entry, why it is not measured or None)."""
    stat, needs = FIGURES[name]
    empty = {"a": None, "b": None, "difference": None, "interval": None}
    for run in (a, b):
        if run.inner_count < params.min_minutes:
            return empty, (
                f"run {run.run_id!r} has {run.inner_count} minutes between its first and last; "
                f"at least {params.min_minutes} are needed"
            )
        if any(run.columns.get(c) is None for c in needs):
            return empty, run.why_missing.get(name, f"{name} not stored for run {run.run_id!r}")
    cols_a = {c: run_col[a.inner] for c in needs if (run_col := a.columns[c]) is not None}
    cols_b = {c: run_col[b.inner] for c in needs if (run_col := b.columns[c]) is not None}
    point_a = float(stat(cols_a, np.arange(a.inner_count)[None, :])[0])
    point_b = float(stat(cols_b, np.arange(b.inner_count)[None, :])[0])
    if math.isnan(point_a) or math.isnan(point_b):
        side = a if math.isnan(point_a) else b
        return empty, f"{name} is not measured in run {side.run_id!r} (no minute reports it)"
    diffs = np.concatenate(
        [
            stat(cols_b, rows_b) - stat(cols_a, rows_a)
            for rows_a, rows_b in zip(idx_a.batches(), idx_b.batches(), strict=True)
        ]
    )
    tail = (1 - params.confidence) / 2 * 100
    diffs = diffs[~np.isnan(diffs)]
    interval = None
    if diffs.size:
        lo, hi = np.percentile(diffs, [tail, 100 - tail])
        interval = [_value(float(lo)), _value(float(hi))]
    entry = {
        "a": _value(point_a),
        "b": _value(point_b),
        "difference": _value(point_b - point_a),
        "interval": interval,
    }
    return entry, None


def _relative(entry: dict[str, Any]) -> float:
    a, b = entry["a"], entry["b"]
    if a == 0:
        return math.inf if b > 0 else 0.0
    return float((b - a) / a)


def _rises(entry: dict[str, Any]) -> bool:
    return entry["interval"] is not None and entry["interval"][0] > 0


def _falls(entry: dict[str, Any]) -> bool:
    return entry["interval"] is not None and entry["interval"][1] < 0


def _pct(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x * 100:+.1f} %"


def _verdict(figures: dict[str, Any], needed: tuple[str, ...]) -> tuple[str, str]:
    """(verdict, the rule that produced it, in words)."""
    t = figures[THROUGHPUT]
    retry, stall = figures["retry_rate"], figures["stall_rate"]
    success = figures["call_success_rate"]
    goodput = figures.get("goodput_tpm_total")
    goodput_falls = "goodput_tpm_total" in needed and goodput is not None and _falls(goodput)
    rel_t = _relative(t)
    if _rises(t) and not (_rises(retry) or _rises(stall) or _falls(success) or goodput_falls):
        held = "; goodput did not fall beyond its interval" if goodput is not None else ""
        return "improved", (
            f"throughput rose beyond its interval ({_pct(rel_t)}); retry and stall rates did "
            "not rise beyond their intervals and call success did not fall beyond its interval"
            + held
        )
    if t["difference"] > 0:
        for name, entry in (("retry rate", retry), ("stall rate", stall)):
            if _rises(entry) and _relative(entry) > rel_t:
                return "moved_the_bottleneck", (
                    f"throughput rose {_pct(rel_t)} but {name} rose {_pct(_relative(entry))} "
                    "(beyond its interval), faster than throughput: the bottleneck moved"
                )
    if _falls(t):
        return "regressed", f"throughput fell beyond its interval ({_pct(rel_t)})"
    if _falls(success) and not _rises(t):
        return "regressed", (
            f"call success fell beyond its interval ({success['difference']:+.4f}) with no "
            "throughput gain beyond its interval"
        )
    if _rises(t) and goodput_falls:
        return "inconclusive", (
            "throughput rose beyond its interval but goodput fell beyond its interval: "
            "not an improvement"
        )
    if _rises(t):
        return "inconclusive", (
            "throughput rose beyond its interval, but retry or stall rate rose beyond its "
            "interval (less than throughput, relatively) or call success fell"
        )
    return "inconclusive", "the throughput change is within its interval"


def _own_verdict(run: RunMinutes) -> dict[str, Any]:
    """A run's own bottleneck verdict and reason, as its compared version sealed them."""
    own = run.bottleneck or {}
    return {"verdict": own.get("verdict"), "reason": own.get("reason")}


def compare(
    a: RunMinutes, b: RunMinutes, params: CompareParams, slo_text: str | None = None
) -> dict[str, Any]:
    """The compare result of two loaded runs (docs/metrics.md#compare)."""
    rng = np.random.default_rng(params.seed)
    rows = RESAMPLE_CELLS // max(a.inner_count, b.inner_count, 1)  # same batches for both
    idx_a = Resamples(rng, a.inner_count, params.resamples, rows)
    idx_b = Resamples(rng, b.inner_count, params.resamples, rows)
    names = [n for n in FIGURES if slo_text is not None or n not in SLO_FIGURES]
    figures: dict[str, Any] = {}
    why: dict[str, str] = {}
    for name in names:
        figures[name], reason = _figure(name, a, b, idx_a, idx_b, params)
        if reason is not None:
            why[name] = reason
    needed = NEEDED + (SLO_NEEDED if slo_text is not None else ())
    missing = [n for n in needed if n in why or figures[n]["interval"] is None]
    if missing:
        verdict = "inconclusive"
        rule = "needed figures not measured: " + "; ".join(
            f"{n} ({why.get(n, 'no interval')})" for n in missing
        )
    else:
        verdict, rule = _verdict(figures, needed)
    own = {"a": _own_verdict(a), "b": _own_verdict(b)}
    if verdict == "moved_the_bottleneck":  # never said without the runs' own verdicts
        rule += (
            f"; each run's own bottleneck verdict: A {own['a']['verdict'] or 'not measured'}, "
            f"B {own['b']['verdict'] or 'not measured'}"
        )
    return {
        "a": a.run_id,
        "b": b.run_id,
        "verdict": verdict,
        "rule": rule,
        "missing": missing,
        "not_measured": why,
        "figures": figures,
        "bottlenecks": own,
        "snapshots": {
            "a": {"version": a.version, "seal": a.seal, "inner_minutes": a.inner_count},
            "b": {"version": b.version, "seal": b.seal, "inner_minutes": b.inner_count},
        },
        "params": {**params.as_dict(), "slo": slo_text},
    }


def compare_runs(
    session: Session,
    run_a: str,
    run_b: str,
    params: CompareParams | None = None,
    slo_text: str | None = None,
) -> dict[str, Any]:
    """Load both runs' newest sealed versions and compare them (B − A); ``session`` is a
    :func:`storage.server.database.read_view`, so both runs are read from one snapshot."""
    a = load_run_minutes(session, run_a, slo_text)
    b = load_run_minutes(session, run_b, slo_text)
    return compare(a, b, params or CompareParams(), slo_text)
