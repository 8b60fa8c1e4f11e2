"""The run page draws the servers' queue and KV cache beside the client's in-flight calls
and TPM, for a sealed run and a live one (docs/dashboard.md)."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.analytics.bottleneck_runs import RunSpec, base_minute_ns, record_run
from tests.analytics.seeding import store
from tests.analytics.verdicts.test_server_bottleneck import _model, _scrape_minutes
from tests.fixtures.model_server_metrics import EngineFigures, FakeModelServer
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.pages.run_panels import run_panels
from tpmledger.ingest.normalize import normalize_request


def _graph(component: Any, graph_id: str) -> Any:
    """The component with ``graph_id`` inside a Dash layout tree."""
    if getattr(component, "id", None) == graph_id:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str):
            found = _graph(child, graph_id)
            if found is not None:
                return found
    return None


def test_run_page_shows_the_servers_beside_the_client(database_url: str) -> None:
    base = base_minute_ns()
    spec = RunSpec("kv-page", lanes=6, cap=8, shape=_model("llama-page"))
    store(database_url, normalize_request(encode_spans(record_run(spec, base))).rows)
    server = FakeModelServer("vllm", model="llama-page").start()
    try:
        busy = EngineFigures(running=6, waiting=5, kv_cache=0.96, prompt_tokens=900)
        _scrape_minutes(database_url, server, base, busy)
    finally:
        server.stop()
    LiveUpdater(database_url).update_once()
    config = DashboardConfig(database_url, slo_text=None)
    for state in ("live", "sealed"):
        if state == "sealed":
            seal_run(database_url, "kv-page")
        panels = run_panels(config, "kv-page")
        graph = _graph(panels.header, "run-serving")
        assert graph is not None, state
        names = {t["name"] for t in graph.figure["data"]}
        prefix = f"vllm {server.instance} (llama-page)"
        assert {"client in-flight (mean)", "client TPM", f"{prefix} waiting"} <= names, names
        kv = next(t for t in graph.figure["data"] if t["name"] == f"{prefix} KV cache (mean)")
        assert set(kv["y"]) == {0.96}

    unrelated = RunSpec("no-server", lanes=2, cap=4, shape=_model("elsewhere"))
    store(database_url, normalize_request(encode_spans(record_run(unrelated, base))).rows)
    seal_run(database_url, "no-server")
    graph = _graph(run_panels(config, "no-server").header, "run-serving")
    assert "not measured" in graph.figure["layout"]["annotations"][0]["text"]
