"""A provider's rate-limit state, as an attempt span reports it (docs/metrics.md#quota-headroom).

Workers declare a quota (``tpmledger.quota.tpm`` / ``.rpm``) or their HTTP instrumentation
captures the provider's response headers as ``http.response.header.<name>`` attributes
(OpenTelemetry HTTP semantic conventions: a string array, first element used; a plain string
is accepted too; ``<name>`` in any case, with hyphens or underscores). OpenAI's
``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*`` and the IETF ``RateLimit-Policy`` /
``RateLimit`` structured fields are read. Each field below is read from its keys, first
readable value wins, span attributes over resource attributes of the same key.

A value that is not a non-negative finite number (``"soon"``, ``"-3"``, ``"NaN"``, an HTTP
date in ``retry-after``, an empty array) is ignored — the next key of the field may still
supply it — and counted in ``quota_values_ignored``: it never rejects the span and never
reaches a figure. A limit of 0 is ignored too (no headroom can be stated against it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from tpmledger.storage.codecs.attempt_row import quota_part, quota_part_from

HEADER: Final = "http.response.header."
_HEADER_LENGTH: Final = len(HEADER)
_INFINITY: Final = float("inf")
_DECLARED_TPM: Final = "tpmledger.quota.tpm"
_DECLARED_RPM: Final = "tpmledger.quota.rpm"
# IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers): read from the structured
# ``RateLimit-Policy`` / ``RateLimit`` headers into these names (see _ietf_values).
_IETF_LIMIT_TOKENS: Final = "(ietf) limit tokens"
_IETF_LIMIT_REQUESTS: Final = "(ietf) limit requests"
_IETF_REMAINING_TOKENS: Final = "(ietf) remaining tokens"
_IETF_REMAINING_REQUESTS: Final = "(ietf) remaining requests"

#: Column → its sources, first readable value wins (the attempt row's quota part): the
#: declared keys, then header *names* (lower case, hyphens:
#: ``http.response.header.X_RateLimit_Limit_Tokens`` is ``x-ratelimit-limit-tokens``), then
#: the IETF fields.
QUOTA_FIELDS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("quota_tpm_declared", (_DECLARED_TPM,)),
    ("quota_rpm_declared", (_DECLARED_RPM,)),
    (
        "ratelimit_limit_tokens",
        ("x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-limit", _IETF_LIMIT_TOKENS),
    ),
    (
        "ratelimit_limit_requests",
        (
            "x-ratelimit-limit-requests",
            "anthropic-ratelimit-requests-limit",
            _IETF_LIMIT_REQUESTS,
            "ratelimit-limit",
        ),
    ),
    (
        "ratelimit_remaining_tokens",
        (
            "x-ratelimit-remaining-tokens",
            "anthropic-ratelimit-tokens-remaining",
            _IETF_REMAINING_TOKENS,
        ),
    ),
    (
        "ratelimit_remaining_requests",
        (
            "x-ratelimit-remaining-requests",
            "anthropic-ratelimit-requests-remaining",
            _IETF_REMAINING_REQUESTS,
            "ratelimit-remaining",
        ),
    ),
    ("retry_after_s", ("retry-after",)),
)
QUOTA_COLUMNS: Final = (*(name for name, _ in QUOTA_FIELDS), "quota_values_ignored")
_IETF_HEADERS: Final = frozenset({"ratelimit", "ratelimit-policy"})
#: Header names (normalized) that carry a rate-limit value.
QUOTA_HEADER_NAMES: Final = frozenset(
    {k for _, keys in QUOTA_FIELDS for k in keys if not k.startswith(("(", "tpmledger."))}
    | _IETF_HEADERS
)
_DECLARED_KEYS: Final = frozenset({_DECLARED_TPM, _DECLARED_RPM})
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


def header_name(key: str) -> str | None:
    """The normalized header name of an ``http.response.header.<name>`` attribute key
    (any case, hyphens or underscores: Python's HTTP instrumentations write underscores),
    else None."""
    if len(key) <= _HEADER_LENGTH or key[:_HEADER_LENGTH].lower() != HEADER:
        return None
    return key[_HEADER_LENGTH:].lower().replace("_", "-")


def reads_quota(keys: Iterable[str]) -> bool:
    """Some key of these is a declared quota or a rate-limit header in any spelling."""
    return any(key in _DECLARED_KEYS or header_name(key) in QUOTA_HEADER_NAMES for key in keys)


def _first_text(value: Any) -> str | None:
    if type(value) is list:
        value = value[0] if value else None
    return value if type(value) is str else None


def _structured_items(value: Any) -> list[tuple[str, dict[str, str]]]:
    """The items of an RFC 8941 list header as (name, parameters): enough of the syntax
    for ``"default";q=100;w=60, "tokens";q=30000;w=60;qu="tokens"`` (strings unquoted)."""
    text = _first_text(value)
    items = []
    for member in (text or "").split(","):
        parts = [p.strip() for p in member.split(";")]
        if not parts[0]:
            continue
        parameters = {}
        for part in parts[1:]:
            key, _, raw = part.partition("=")
            parameters[key.strip().lower()] = raw.strip().strip('"')
        items.append((parts[0].strip('"'), parameters))
    return items


def _ietf_values(headers: dict[str, Any]) -> None:
    """Adds the IETF fields to ``headers``: the policy's quota ``q`` per window ``w``
    seconds as a per-minute limit, the current ``r`` as remaining; the unit ``qu`` says
    requests (the default) or tokens."""
    units: dict[str, str] = {}
    for name, p in _structured_items(headers.get("ratelimit-policy")):
        unit = "tokens" if "token" in p.get("qu", "") else "requests"
        units[name] = unit
        quota, window = quota_number(p.get("q")), quota_number(p.get("w", "60"))
        limit = _IETF_LIMIT_TOKENS if unit == "tokens" else _IETF_LIMIT_REQUESTS
        if quota is not None and window and limit not in headers:
            headers[limit] = quota * 60.0 / window
    for name, p in _structured_items(headers.get("ratelimit")):
        tokens = units.get(name) == "tokens" or "token" in p.get("qu", "")
        left = _IETF_REMAINING_TOKENS if tokens else _IETF_REMAINING_REQUESTS
        if "r" in p and left not in headers:
            headers[left] = p["r"]


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

    Ingest calls it only for spans whose key shape :func:`reads_quota`; others get
    :data:`NO_QUOTA`."""
    found: dict[str, Any] = {}
    for attributes in (resource, span):  # span attributes override the resource's
        for key, raw in attributes.items():
            if key in _DECLARED_KEYS:
                found[key] = raw
                continue
            name = header_name(key)
            if name is not None and name in QUOTA_HEADER_NAMES and raw is not None:
                found[name] = raw
    if not _IETF_HEADERS.isdisjoint(found):
        _ietf_values(found)
    values: dict[str, Any] = {}
    ignored = 0
    for name, keys in QUOTA_FIELDS:
        value = None
        for key in keys:
            raw = found.get(key)
            if raw is None:
                continue
            number = quota_number(raw)
            if number is None or (number == 0.0 and name in _LIMITS):
                ignored += 1
                continue
            value = number
            break
        values[name] = value
    values["quota_values_ignored"] = ignored
    return quota_part_from(values)
