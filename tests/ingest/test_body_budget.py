"""The bound on request bodies in flight (ingest/body_budget.py, SPEC §3 overload, §7)."""

from __future__ import annotations

import pytest

from ingest.body_budget import UNDECLARED_BYTES, BodyBudget
from ingest.error_taxonomy import Overloaded


def test_admits_within_budget_and_releases_on_exit() -> None:
    budget = BodyBudget(1000)
    with budget.hold("600"):
        assert budget.in_use == 600
        with budget.hold("400"):
            assert budget.in_use == 1000
    assert budget.in_use == 0


def test_refuses_past_budget_with_retry_after() -> None:
    budget = BodyBudget(1000, retry_after_s=3)
    with budget.hold("900"), pytest.raises(Overloaded) as refused, budget.hold("200"):
        pass
    assert refused.value.http_status == 503
    assert refused.value.http_headers() == {"Retry-After": "3"}
    assert budget.in_use == 0


def test_a_single_oversize_body_is_admitted_alone() -> None:
    budget = BodyBudget(1000)
    with budget.hold("5000"):
        assert budget.in_use == 5000
        with pytest.raises(Overloaded), budget.hold("1"):
            pass


def test_released_when_the_request_fails() -> None:
    budget = BodyBudget(1000)
    with pytest.raises(RuntimeError), budget.hold("500"):
        raise RuntimeError("decode failed")
    assert budget.in_use == 0


@pytest.mark.parametrize("header", [None, "", "chunked", "-1"])
def test_undeclared_length_is_charged_a_fixed_amount(header: str | None) -> None:
    budget = BodyBudget(10 * UNDECLARED_BYTES)
    with budget.hold(header):
        assert budget.in_use == UNDECLARED_BYTES
