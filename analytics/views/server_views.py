"""``GET /v1/runs/{run_id}/servers``: the serving side beside the run
(docs/metrics.md#serving-side-metrics).

The vLLM / SGLang minutes joined to the run — by its request models and time, or by the
run id the series carry (:mod:`tpmledger.storage.readers.server_minutes_read`) — per server
instance, engine and model. A figure the server did not report in a minute is ``null``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.readers.live_read import run_state
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.readers.server_minutes_read import ServerMinute, run_models, server_minutes
from tpmledger.storage.readers.target_minutes import target_minutes

#: Keys of one server minute, in the documented order.
SERVER_MINUTE_KEYS: tuple[str, ...] = (
    "minute_utc",
    "running_mean",
    "waiting_mean",
    "waiting_max",
    "kv_cache_mean",
    "kv_cache_max",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
)


def _minute(s: ServerMinute) -> dict[str, Any]:
    return {
        "minute_utc": minute_text_ns(s.minute_ns),
        **{key: clean(getattr(s, key)) for key in SERVER_MINUTE_KEYS[1:]},
    }


def servers_object(session: Session, run_id: str) -> dict[str, Any]:
    """``{"servers": [{instance, engine, model, minutes: [...]}]}``; raises
    :class:`UnknownRun` for an unknown run."""
    if run_state(session, run_id) is None:
        raise UnknownRun(run_id)
    models = run_models(target_minutes(session, [run_id]))
    servers: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for s in server_minutes(session, run_id, models):
        servers.setdefault((s.instance, s.engine, s.model), []).append(_minute(s))
    return {
        "servers": [
            {"instance": instance, "engine": engine, "model": model, "minutes": minutes}
            for (instance, engine, model), minutes in servers.items()
        ]
    }
