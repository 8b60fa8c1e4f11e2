"""The demo's runs (``tpmledger up --demo``, ``tpmledger simulate --demo``): every verdict
within about six minutes (docs/simulator.md#the-demo).

Four fleets start together and start calls for :data:`DEMO_RUN_S` seconds. That is longer
than four minutes, so each run covers at least five UTC minutes, three of them inner
(strictly between its first and last), which Compare and the bottleneck verdict need:

- a cap sweep (``demo_<UTC>_sweep``: caps 4, 8 and 32, two shards each) against a provider
  quota of :data:`DEMO_QUOTA_TPM` tokens a minute, with no 5xx answers and no stalls.
  Caps 4 and 8 use at most about 60 % of the quota and keep their slots full: both are bounded
  by the concurrency cap, and cap 8 against cap 4 is ``improved``. Cap 32 asks for more
  than twice the quota: it is bounded by the provider's quota, and against cap 8 it is
  ``moved_the_bottleneck`` (more tokens, but retries grow far faster). The sweep's
  recommended cap is 8.
- ``demo_<UTC>_serving`` (four shards at cap 4): 15 % of answers are 5xx and its server's
  KV cache holds about a third of the calls in flight (the rest wait in its queue), so it is
  bounded by the serving side, and its server's vLLM metrics say why. Only this run's server
  listens on the port the command names (``--server-port``: ``up --demo`` scrapes it).
"""

from __future__ import annotations

from tpmledger.simulator.fleet import FleetConfig
from tpmledger.simulator.sweep import sweep_configs

#: Seconds each demo run starts calls: > 4 minutes, so ≥ 3 inner minutes however the run
#: falls on the clock (a run also ends a little later: the calls it started finish).
DEMO_RUN_S = 270.0
DEMO_SHARDS = 2
DEMO_SWEEP_CAPS = [4, 8, 32]
#: Tokens a minute the demo's provider grants: cap 8 (16 slots) uses about 60 % of it (it
#: must stay below 80 % for the cap-bound verdict; at 140,000 it reached 81 %), cap 32 (64
#: slots) asks for more than twice it.
DEMO_QUOTA_TPM = 200_000
DEMO_SERVING_ERROR_RATE = 0.15
#: KV-cache tokens of the serving run's server: its 16 calls in flight hold ~10,600 tokens.
DEMO_KV_CACHE_TOKENS = 3_500
#: The serving run's model. Server metrics that name no run join every run asking for their
#: model (docs/metrics.md#serving-side-metrics): with one model for all four fleets, the
#: serving run's saturated server was joined to the cap sweep too, whose cap-bound runs
#: were then called serving-bound.
DEMO_SERVING_MODEL = "sim-chat-2"


def demo_configs(base: FleetConfig, stamp: str) -> list[FleetConfig]:
    """The demo's runs, to be started together; ``base`` carries the endpoint, protocol,
    seed and workload (its shape and duration are replaced)."""
    quiet = base.server.model_copy(
        update={"quota_tpm": DEMO_QUOTA_TPM, "error_rate": 0.0, "timeout_rate": 0.0, "port": 0}
    )
    sweep = base.model_copy(
        update={
            "run_id": f"demo_{stamp}_sweep",
            "sweep_id": None,
            "shards": DEMO_SHARDS,
            "duration_s": DEMO_RUN_S,
            "server": quiet,
        }
    )
    serving = base.model_copy(
        update={
            "run_id": f"demo_{stamp}_serving",
            "sweep_id": None,
            "shards": 4,
            "concurrency": 4,
            "duration_s": DEMO_RUN_S,
            "workload": base.workload.model_copy(update={"model": DEMO_SERVING_MODEL}),
            "server": base.server.model_copy(
                update={
                    "error_rate": DEMO_SERVING_ERROR_RATE,
                    "kv_cache_tokens": DEMO_KV_CACHE_TOKENS,
                    "model": DEMO_SERVING_MODEL,
                }
            ),
        }
    )
    return [*sweep_configs(sweep, DEMO_SWEEP_CAPS), serving]
