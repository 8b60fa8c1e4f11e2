"""A cap sweep: one run per cap, the same request mix, one ``tpmledger.sweep.id``.

Analytics walks the caps upward to find the knee (docs/metrics.md); the simulator only has to keep
everything but the cap fixed: same seed (so the same calls in the same order per shard), same
shard count, duration and server, and a fresh server per run so no run inherits another's
spent token budget.
"""

from __future__ import annotations

from collections.abc import Callable

from tpmledger.simulator.fleet import FleetConfig, FleetResult, ProgressCallback, run_fleet


def sweep_configs(base: FleetConfig, caps: list[int]) -> list[FleetConfig]:
    """The runs of a sweep: ``<run_id>_cap<N>`` under sweep id ``base.sweep_id or run_id``."""
    sweep_id = base.sweep_id or base.run_id
    return [
        base.model_copy(
            update={"concurrency": cap, "run_id": f"{base.run_id}_cap{cap}", "sweep_id": sweep_id}
        )
        for cap in caps
    ]


def run_sweep(
    base: FleetConfig,
    caps: list[int],
    progress_for: Callable[[FleetConfig], ProgressCallback | None] = lambda _c: None,
    progress_every_s: float = 5.0,
    on_result: Callable[[FleetResult], None] = lambda _r: None,
) -> list[FleetResult]:
    """Run the caps in order; stop early if a run was interrupted (Ctrl-C)."""
    results: list[FleetResult] = []
    for config in sweep_configs(base, caps):
        result = run_fleet(config, progress_for(config), progress_every_s)
        results.append(result)
        on_result(result)
        if result.interrupted:
            break
    return results


def parse_caps(text: str) -> list[int]:
    """``"4,8,16"`` → ``[4, 8, 16]`` (positive, strictly increasing)."""
    caps = [int(part) for part in text.split(",") if part.strip()]
    if not caps or any(c <= 0 for c in caps) or caps != sorted(set(caps)):
        raise ValueError(f"caps must be positive and increasing, got {text!r}")
    return caps
