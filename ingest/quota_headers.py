"""A provider's rate-limit state, as an attempt span reports it (docs/metrics.md#quota-headroom).

Workers declare a quota (``tpmledger.quota.tpm`` / ``.rpm``) or their HTTP instrumentation
captures the provider's response headers as ``http.response.header.<name>`` attributes
(OpenTelemetry HTTP semantic conventions: a string array, first element used; a plain string
is accepted too). Each field below is read from its keys, first readable value wins, span
attributes over resource attributes of the same key.

A value that is not a non-negative finite number (``"soon"``, ``"-3"``, ``"NaN"``, an HTTP
date in ``retry-after``, an empty array) is ignored — the next key of the field may still
supply it — and counted in ``quota_values_ignored``: it never rejects the span and never
reaches a figure. A limit of 0 is ignored too (no headroom can be stated against it).
"""

from __future__ import annotations

from typing import Any, Final

from tpmledger.storage.attempt_row import quota_part, quota_part_from

HEADER: Final = "http.response.header."
_INFINITY: Final = float("inf")

#: Column → its keys, first readable value wins (the attempt row's quota part).
QUOTA_FIELDS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("quota_tpm_declared", ("tpmledger.quota.tpm",)),
    ("quota_rpm_declared", ("tpmledger.quota.rpm",)),
    (
        "ratelimit_limit_tokens",
        (HEADER + "x-ratelimit-limit-tokens", HEADER + "anthropic-ratelimit-tokens-limit"),
    ),
    (
        "ratelimit_limit_requests",
        (HEADER + "x-ratelimit-limit-requests", HEADER + "anthropic-ratelimit-requests-limit"),
    ),
    (
        "ratelimit_remaining_tokens",
        (HEADER + "x-ratelimit-remaining-tokens", HEADER + "anthropic-ratelimit-tokens-remaining"),
    ),
    (
        "ratelimit_remaining_requests",
        (
            HEADER + "x-ratelimit-remaining-requests",
            HEADER + "anthropic-ratelimit-requests-remaining",
        ),
    ),
    ("retry_after_s", (HEADER + "retry-after",)),
)
QUOTA_COLUMNS: Final = (*(name for name, _ in QUOTA_FIELDS), "quota_values_ignored")
QUOTA_KEYS: Final = frozenset(key for _, keys in QUOTA_FIELDS for key in keys)
_LIMITS: Final = frozenset(
    {
        "quota_tpm_declared",
        "quota_rpm_declared",
        "ratelimit_limit_tokens",
        "ratelimit_limit_requests",
    }
)
#: The row part of a span that reports none of the keys.
NO_QUOTA: Final = quota_part(
    **dict.fromkeys(name for name, _ in QUOTA_FIELDS), quota_values_ignored=0
)


def quota_number(value: Any) -> float | None:
    """A header or declared value as a non-negative finite number (None: unreadable)."""
    if type(value) is list:
        if not value:
            return None
        value = value[0]
    kind = type(value)
    if kind is str:
        try:
            number = float(value)  # surrounding whitespace is allowed
        except ValueError:
            return None
    elif kind is int or kind is float:  # not bool: its type is bool
        number = float(value)
    else:
        return None
    return number if 0.0 <= number < _INFINITY else None  # NaN compares false


def quota_values(span: dict[str, Any], resource: dict[str, Any]) -> tuple[Any, ...]:
    """The quota part of one attempt's row (:data:`QUOTA_COLUMNS`, by name).

    Ingest calls it only for spans whose key shape holds a :data:`QUOTA_KEYS` key
    (``SpanPlan.reads_quota``); others get :data:`NO_QUOTA`."""
    values: dict[str, Any] = {}
    ignored = 0
    for name, keys in QUOTA_FIELDS:
        found = None
        for key in keys:
            raw = span.get(key)
            if raw is None:
                raw = resource.get(key)
                if raw is None:
                    continue
            number = quota_number(raw)
            if number is None or (number == 0.0 and name in _LIMITS):
                ignored += 1
                continue
            found = number
            break
        values[name] = found
    values["quota_values_ignored"] = ignored
    return quota_part_from(values)
