"""A scraped Prometheus exposition as server readings (docs/metrics.md#serving-side-metrics).

Parsed with ``prometheus_client``'s parser, never by hand. Samples of the vLLM and SGLang
names (:mod:`ingest.server_metrics`) become readings of the scrape's time (a sample's own
timestamp wins); the ``_created`` series of a counter or histogram gives its start time,
so a server restart is seen even when the new count has already passed the old one.
Everything else in the exposition is ignored.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tpmledger.durations import MINUTE_NS
from tpmledger.ingest.server_metrics import (
    GAUGES,
    HISTOGRAMS,
    CounterReading,
    GaugeCombiner,
    ServerReadings,
    counter_field,
    is_server_metric,
    key_of,
    stream_id,
    usable,
)

_NS = 1_000_000_000


def _labels_key(base: str, labels: dict[str, str]) -> tuple[str, frozenset[tuple[str, str]]]:
    return base, frozenset(labels.items())


def _time_ns(sample: Any, default_ns: int) -> int:
    stamp = sample.timestamp
    if stamp is None:
        return default_ns
    seconds = float(getattr(stamp, "sec", stamp)) + float(getattr(stamp, "nsec", 0)) / _NS
    return int(seconds * _NS)


def readings_from_exposition(text: str, instance: str, time_ns: int) -> ServerReadings:
    """The server readings of one scrape of ``instance`` at ``time_ns``.

    Raises ``ValueError`` when the text is not a Prometheus exposition."""
    samples = [
        s
        for family in text_string_to_metric_families(text)
        if is_server_metric(family.name)
        for s in family.samples
    ]
    created = {
        _labels_key(s.name.removesuffix("_created"), s.labels): s.value
        for s in samples
        if s.name.endswith("_created")
    }
    readings = ServerReadings()
    gauges = GaugeCombiner()
    for sample in samples:
        name, value = sample.name, float(sample.value)
        target = _target(name)
        if target is None:
            continue
        engine, kind, reading, base = target
        key = key_of(instance, engine, sample.labels)
        if key is None or not usable(value):
            readings.rejected += 1
            continue
        at = _time_ns(sample, time_ns)
        if kind == "gauge":
            gauges.add(key, at, reading, value)
            continue
        start_s = created.get(_labels_key(base, sample.labels))
        readings.counters.append(
            CounterReading(
                key=key,
                minute_ns=at // MINUTE_NS * MINUTE_NS,
                field=reading,
                stream=stream_id(instance, name, sample.labels),
                start_ns=int(start_s * _NS) if start_s and usable(start_s) else 0,
                value=value,
            )
        )
    readings.gauges.extend(gauges.readings())
    return readings


def _target(name: str) -> tuple[str, str, str, str] | None:
    """(engine, "gauge" | "counter", field, base name) of a sample name, or None."""
    if name in GAUGES:
        engine, reading = GAUGES[name]
        return engine, "gauge", reading, name
    if name.endswith("_total") and (found := counter_field(name)) is not None:
        return found[0], "counter", found[1], name.removesuffix("_total")
    for suffix, which in (("_sum", 1), ("_count", 2)):
        base = name.removesuffix(suffix)
        if name.endswith(suffix) and base in HISTOGRAMS:
            spec = HISTOGRAMS[base]
            return spec[0], "counter", spec[which], base
    return None
