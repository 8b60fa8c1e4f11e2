"""The provider's rate-limit state read from attempt spans (docs/metrics.md#quota-headroom)."""

from __future__ import annotations

import math

import pytest

from tests.ingest.span_builders import normalize_one
from tpmledger.ingest.quota_headers import QUOTA_COLUMNS, quota_number

H = "http.response.header."
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10}


def quota_of(attributes: dict[str, object], resource: dict[str, object] | None = None) -> dict:
    row = normalize_one({**CHAT, **attributes}, resource=resource)
    return {name: row[name] for name in QUOTA_COLUMNS}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["30000"], 30000.0),  # OTel HTTP semconv: a string array, first element
        (["12.5", "99"], 12.5),
        ("  450 ", 450.0),  # a plain string
        (7, 7.0),
        (0.25, 0.25),
        ("0", 0.0),
        ([], None),
        (["soon"], None),
        ("-3", None),
        ("NaN", None),
        ("Infinity", None),
        ("1e400", None),
        ("Wed, 21 Oct 2026 07:28:00 GMT", None),  # retry-after as an HTTP date
        (True, None),
        ({"a": 1}, None),
    ],
)
def test_quota_number_reads_non_negative_finite_numbers_only(
    value: object, expected: object
) -> None:
    assert quota_number(value) == expected


def test_openai_headers_as_string_arrays() -> None:
    got = quota_of(
        {
            H + "x-ratelimit-limit-tokens": ["150000"],
            H + "x-ratelimit-limit-requests": ["500"],
            H + "x-ratelimit-remaining-tokens": ["149000"],
            H + "x-ratelimit-remaining-requests": ["499"],
            H + "retry-after": ["1.5"],
        }
    )
    assert got == {
        "quota_tpm_declared": None,
        "quota_rpm_declared": None,
        "ratelimit_limit_tokens": 150000.0,
        "ratelimit_limit_requests": 500.0,
        "ratelimit_remaining_tokens": 149000.0,
        "ratelimit_remaining_requests": 499.0,
        "retry_after_s": 1.5,
        "quota_values_ignored": 0,
    }


def test_anthropic_headers_as_strings_and_declared_quota_on_the_resource() -> None:
    got = quota_of(
        {
            H + "anthropic-ratelimit-tokens-limit": "80000",
            H + "anthropic-ratelimit-tokens-remaining": "100",
            H + "anthropic-ratelimit-requests-limit": "50",
            H + "anthropic-ratelimit-requests-remaining": "0",
        },
        resource={"tpmledger.quota.tpm": "90000", "tpmledger.quota.rpm": 60},
    )
    assert got["quota_tpm_declared"] == 90000.0 and got["quota_rpm_declared"] == 60.0
    assert got["ratelimit_limit_tokens"] == 80000.0
    assert got["ratelimit_limit_requests"] == 50.0
    assert got["ratelimit_remaining_tokens"] == 100.0
    assert got["ratelimit_remaining_requests"] == 0.0
    assert got["quota_values_ignored"] == 0


def test_first_present_wins_and_span_overrides_resource() -> None:
    got = quota_of(
        {
            H + "x-ratelimit-limit-tokens": ["1000"],
            H + "anthropic-ratelimit-tokens-limit": "2000",
            "tpmledger.quota.tpm": 3000,
        },
        resource={"tpmledger.quota.tpm": 4000},
    )
    assert got["ratelimit_limit_tokens"] == 1000.0
    assert got["quota_tpm_declared"] == 3000.0


def test_garbage_is_ignored_and_counted_and_never_rejects_the_span() -> None:
    got = quota_of(
        {
            H + "x-ratelimit-limit-tokens": ["unlimited"],  # ignored: the next key supplies it
            H + "anthropic-ratelimit-tokens-limit": "5000",
            H + "x-ratelimit-remaining-tokens": ["-1"],
            H + "x-ratelimit-limit-requests": ["0"],  # a limit of 0 states no headroom
            H + "retry-after": "Wed, 21 Oct 2026 07:28:00 GMT",
            "tpmledger.quota.rpm": math.nan,
        }
    )
    assert got == {
        "quota_tpm_declared": None,
        "quota_rpm_declared": None,
        "ratelimit_limit_tokens": 5000.0,
        "ratelimit_limit_requests": None,
        "ratelimit_remaining_tokens": None,
        "ratelimit_remaining_requests": None,
        "retry_after_s": None,
        "quota_values_ignored": 5,
    }


def test_a_span_without_rate_limit_state_stores_nulls() -> None:
    got = quota_of({})
    assert got == {**dict.fromkeys(QUOTA_COLUMNS), "quota_values_ignored": 0}


@pytest.mark.parametrize(
    "key",
    [
        "x-ratelimit-remaining-tokens",
        "x_ratelimit_remaining_tokens",  # Python's HTTP instrumentations
        "X-RateLimit-Remaining-Tokens",
        "X_RATELIMIT_REMAINING_TOKENS",
    ],
)
def test_header_names_in_any_spelling(key: str) -> None:
    assert quota_of({H + key: ["42"]})["ratelimit_remaining_tokens"] == 42.0


def test_ietf_ratelimit_policy_and_ratelimit_fields() -> None:
    got = quota_of(
        {
            H + "ratelimit_policy": ['"default";q=100;w=60, "tok";q=30000;w=30;qu="tokens"'],
            H + "ratelimit": '"default";r=50;t=30, "tok";r=1200;t=10',
        }
    )
    assert got["ratelimit_limit_requests"] == 100.0
    assert got["ratelimit_limit_tokens"] == 60000.0  # 30,000 per 30 s
    assert got["ratelimit_remaining_requests"] == 50.0
    assert got["ratelimit_remaining_tokens"] == 1200.0


def test_openai_headers_win_over_ietf_fields() -> None:
    got = quota_of(
        {
            H + "x-ratelimit-limit-requests": "500",
            H + "ratelimit-policy": '"default";q=100;w=60',
        }
    )
    assert got["ratelimit_limit_requests"] == 500.0


def test_unreadable_ietf_fields_are_ignored_not_rejected() -> None:
    got = quota_of({H + "ratelimit-policy": '"default";q=lots;w=60', H + "ratelimit": "garbage"})
    assert got["ratelimit_limit_requests"] is None
    assert got["ratelimit_remaining_requests"] is None
