"""The shipped monitoring files against the real tools: Debian's Prometheus scrapes a running
tpmledger's /metrics, its figures equal the read API's for the same minute, and a simulated
retry storm makes TpmledgerRetryStorm fire and reach a webhook through Alertmanager.

The test copies deploy/prometheus and deploy/alertmanager with short intervals (1 s scrapes
and evaluations, `for:` of 2 s, no group wait): the shipped files keep their durations.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from tests.fixtures.servers import free_port, start_ingest, terminate, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RUN_ID = 'storm "run" 1'

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None,
        reason="Debian packages prometheus and prometheus-alertmanager are not installed",
    ),
]


@dataclass
class Webhook:
    """A receiver of Alertmanager's webhook posts."""

    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [
            alert
            for post in self.posts
            for alert in post["alerts"]
            if alert["labels"].get("alertname") == name
        ]


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    port = free_port()
    hook = Webhook(f"http://127.0.0.1:{port}/alerts")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hook.posts.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()


def _short_rules(path: Path) -> None:
    """alerts.yml with every `for:` at 2 s (the shipped file is not touched)."""
    text = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    path.write_text(re.sub(r"(?m)^(\s+for:) \S+$", r"\1 2s", text))


def _prometheus_config(path: Path, ingest: str, alertmanager: str, rules: Path) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-local.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(rules)]
    config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [alertmanager]
    config["scrape_configs"][0]["static_configs"][0]["targets"] = [ingest]
    path.write_text(yaml.safe_dump(config))


def _alertmanager_config(path: Path, webhook_url: str) -> None:
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    config["route"].update(group_wait="0s", group_interval="1s")
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url
    path.write_text(yaml.safe_dump(config))


def _start(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def _query(prometheus: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"query": expr}
    if at is not None:
        params["time"] = at
    answer = httpx.get(f"{prometheus}/api/v1/query", params=params, timeout=10).json()
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def test_prometheus_scrapes_and_a_retry_storm_pages_the_webhook(
    database_url: str, webhook: Webhook
) -> None:
    work = Path(tempfile.mkdtemp(prefix="monitoring-"))
    env = {
        **os.environ,
        "TPMLEDGER_DATABASE_URL": database_url,
        "TPMLEDGER_MINUTE_CLOSE_AFTER_S": "5",
        "TPMLEDGER_LIVE_POLL_S": "0.5",
    }
    ingest = start_ingest(database_url, env={"TPMLEDGER_MINUTE_CLOSE_AFTER_S": "5"})
    processes: list[subprocess.Popen[bytes]] = []
    try:
        analytics = [sys.executable, "-m", "tpmledger.cli.main", "serve", "analytics"]
        processes.append(_start(analytics, work / "analytics.log", env))
        am_port, prom_port = free_port(), free_port()
        _alertmanager_config(work / "alertmanager.yml", webhook.url)
        processes.append(
            _start(
                [
                    "prometheus-alertmanager",
                    f"--config.file={work / 'alertmanager.yml'}",
                    f"--storage.path={work / 'am-data'}",
                    f"--web.listen-address=127.0.0.1:{am_port}",
                    "--cluster.listen-address=",
                ],
                work / "alertmanager.log",
            )
        )
        _short_rules(work / "alerts.yml")
        ingest_target = ingest.http_url.removeprefix("http://")
        _prometheus_config(
            work / "prometheus.yml", ingest_target, f"127.0.0.1:{am_port}", work / "alerts.yml"
        )
        processes.append(
            _start(
                [
                    "prometheus",
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'prom-data'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                work / "prometheus.log",
            )
        )
        prometheus = f"http://127.0.0.1:{prom_port}"
        wait_for(lambda: httpx.get(f"{prometheus}/-/ready", timeout=2).status_code == 200, 60)
        # Prometheus scrapes ingest's /metrics (its own series before any run exists).
        wait_for(lambda: _query(prometheus, 'up{job="tpmledger"} == 1'), 30)
        wait_for(lambda: _query(prometheus, "tpmledger_ingest_spans_received_total"), 30)

        simulate = [
            sys.executable, "-m", "tpmledger.cli.main", "simulate", "--endpoint", ingest.http_url,
            "--run-id", RUN_ID, "--shards", "2", "--concurrency", "4", "--duration", "75s",
            "--speed", "5", "--pitfall", "retry-storm", "--progress-every", "30",
        ]  # fmt: skip
        fleet = _start(simulate, work / "simulate.log", env)
        processes.append(fleet)
        run = f'run_id="{_label(RUN_ID)}"'
        # The storm pages: Prometheus fires TpmledgerRetryStorm, Alertmanager posts it.
        wait_for(lambda: webhook.alerts("TpmledgerRetryStorm"), 180, interval=1)
        [alert] = webhook.alerts("TpmledgerRetryStorm")[:1]
        assert alert["status"] == "firing"
        assert alert["labels"]["run_id"] == RUN_ID
        assert alert["labels"]["severity"] == "page"
        assert alert["annotations"]["summary"] == f"Retry storm in run {RUN_ID}"
        # The run page's path, percent-encoded (the dashboard unquotes it).
        link = "http://127.0.0.1:8050/runs/storm%20%22run%22%201"
        assert alert["annotations"]["dashboard"] == link
        assert _query(prometheus, f"tpmledger_run_retry_storm{{{run}}} == 1")

        assert fleet.wait(timeout=180) == 0, (work / "simulate.log").read_text()[-2000:]
        # Once the data settled, Prometheus' newest closed minute equals the read API's row.

        def figures_agree() -> bool:
            at = time.time()
            [minute] = _query(prometheus, f"tpmledger_run_minute_timestamp_seconds{{{run}}}", at)
            [tpm] = _query(prometheus, f'tpmledger_run_minute_tpm{{{run},token_type="total"}}', at)
            [rate] = _query(prometheus, f"tpmledger_run_minute_retry_rate{{{run}}}", at)
            minute_utc = datetime.fromtimestamp(float(minute["value"][1]), UTC)
            rows = httpx.get(
                f"{ingest.http_url}/v1/runs/{quote(RUN_ID, safe='')}/minutes", timeout=10
            ).json()["minutes"]
            row = next(
                r for r in rows if r["minute_utc"] == minute_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
            )
            return (
                row["state"] in ("closed", "sealed")
                and float(tpm["value"][1]) == row["tpm_total"] > 0
                and float(rate["value"][1]) == row["retry_rate"]
            )

        wait_for(figures_agree, 60, interval=1)
    finally:
        for process in reversed(processes):
            terminate(process)
        ingest.stop()
        shutil.rmtree(work, ignore_errors=True)
