"""How the diagnostics are computed (docs/metrics.md#diagnostics): stored and printed with
them, sealed or live. Light on purpose (no Polars): the read API states a live run's."""

from __future__ import annotations

from typing import Any

from tpmledger.analytics.kernels.figure_rules import DEFAULT_RETRY_BUDGET


def diagnostics_params(budget: float = DEFAULT_RETRY_BUDGET) -> dict[str, Any]:
    """How the diagnostics were computed; stored and printed with them."""
    return {
        "retry_budget": budget,
        "retry_storm": "minutes where retries / (attempts - retries) > retry_budget",
        "deadline": "tpmledger.deadline_s, else tpmledger.request.timeout_s (span, resource), "
        "else the largest request timeout the run declared",
        "slot_time": "end - start of the attempt span",
        "tool_overlap": "execute_tool spans of the same trace, clipped to the slot, merged",
        "in_flight_sampling": "whole_second_instants",
    }
