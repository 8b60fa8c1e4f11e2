"""deploy/prometheus, deploy/alertmanager and deploy/grafana are valid for the real tools
(promtool, amtool from Debian's packages), every alert rule has unit tests that pass, and
the compose `monitoring` profile mounts these files where their configs expect them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
ALERTS = {
    "TpmledgerRetryStorm",
    "TpmledgerRateLimited",
    "TpmledgerQuotaNearlyExhausted",
    "TpmledgerShardSilent",
    "TpmledgerRunStalled",
    "TpmledgerIngestRejecting",
    "TpmledgerServingSaturated",
}
#: The per-run series of docs/operations.md#per-run-series and ingest's own.
RUN_SERIES = {
    "tpmledger_run_tokens_total",
    "tpmledger_run_attempts_total",
    "tpmledger_run_retries_total",
    "tpmledger_run_errors_total",
    "tpmledger_run_minute_tpm",
    "tpmledger_run_minute_retry_rate",
    "tpmledger_run_minute_ttft_p95_seconds",
    "tpmledger_run_minute_in_flight_mean",
    "tpmledger_run_minute_timestamp_seconds",
    "tpmledger_run_concurrency_cap",
    "tpmledger_run_quota_headroom_ratio",
    "tpmledger_run_retry_storm",
    "tpmledger_run_shards_silent",
    "tpmledger_run_live",
    "tpmledger_run_data_age_seconds",
}
#: The servers' series (docs/operations.md#serving-side-series).
SERVER_SERIES = {"tpmledger_server_saturated"}
#: Alerts about a server or ingest itself, not a run.
NOT_RUN_ALERTS = {"TpmledgerIngestRejecting", "TpmledgerServingSaturated"}

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool missing (Debian package prometheus)"
)
needs_amtool = pytest.mark.skipif(
    shutil.which("amtool") is None,
    reason="amtool missing (Debian package prometheus-alertmanager)",
)


def _run(*argv: str | Path) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
    return result.stdout + result.stderr


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_each_alert_has_for_severity_and_annotations_naming_the_run() -> None:
    rules = {r["alert"]: r for r in _rules()}
    assert set(rules) == ALERTS
    for name, rule in rules.items():
        assert rule.get("for"), f"{name}: no for:"
        assert rule["labels"]["severity"] in ("page", "warning"), name
        annotations = rule["annotations"]
        assert {"summary", "description", "dashboard"} <= set(annotations), name
        if name not in NOT_RUN_ALERTS:
            for key in ("summary", "description"):
                assert "{{ $labels.run_id }}" in annotations[key], f"{name}.{key}"
            link = '/runs/{{ $labels.run_id | urlquery | reReplaceAll "[+]" "%20" }}'
            assert link in annotations["dashboard"], name
        assert "$externalLabels.tpmledger_dashboard_url" in annotations["dashboard"], name


def test_rules_use_only_series_tpmledger_exposes() -> None:
    used = {m for r in _rules() for m in re.findall(r"tpmledger_[a-z_0-9]+", r["expr"])}
    ingest = {"tpmledger_ingest_requests_total", "tpmledger_ingest_spans_rejected_total"}
    known = RUN_SERIES | ingest | SERVER_SERIES
    assert used <= known, used - known


@needs_promtool
def test_promtool_checks_the_rules_and_both_scrape_configs() -> None:
    assert "SUCCESS: 7 rules found" in _run("promtool", "check", "rules", RULES)
    _run("promtool", "check", "config", DEPLOY / "prometheus" / "prometheus-local.yml")
    # The compose config names paths inside the container: syntax only here.
    _run("promtool", "check", "config", "--syntax-only", DEPLOY / "prometheus" / "prometheus.yml")


@needs_promtool
def test_every_rule_has_unit_tests_that_fire_and_hold_still() -> None:
    _run("promtool", "test", "rules", RULE_TESTS)
    tested: dict[str, set[bool]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            tested.setdefault(check["alertname"], set()).add(bool(check["exp_alerts"]))
    assert tested == {name: {True, False} for name in ALERTS}


@needs_amtool
def test_alertmanager_example_and_its_commented_slack_receiver_are_valid(tmp_path: Path) -> None:
    example = DEPLOY / "alertmanager" / "alertmanager.yml"
    _run("amtool", "check-config", example)
    # Uncommented, the Slack route and receiver are valid too (prose comments start with a
    # capital letter; commented-out configuration does not).
    uncommented = re.sub(r"(?m)^(\s*)# (?=[-a-z ])", r"\1", example.read_text())
    secret = tmp_path / "slack_webhook_url"
    secret.write_text("https://hooks.slack.com/services/T000/B000/XXXX\n")
    uncommented = uncommented.replace("/run/secrets/slack_webhook_url", str(secret))
    config = tmp_path / "alertmanager.yml"
    config.write_text(uncommented)
    parsed = yaml.safe_load(uncommented)
    assert "tpmledger-slack" in {r["name"] for r in parsed["receivers"]}
    assert any(r.get("receiver") == "tpmledger-slack" for r in parsed["route"]["routes"])
    _run("amtool", "check-config", config)


def test_grafana_dashboard_draws_the_fleet_from_the_provisioned_source() -> None:
    source = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"][0]
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "tpmledger-fleet.json").read_text())
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    for wanted in ("TPM by token type", "Retry rate", "429", "TTFT p95", "In flight vs cap",
                   "Quota headroom per target", "Silent shards", "Serving side"):  # fmt: skip
        assert wanted in titles, wanted
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"tpmledger_[a-z_0-9]+", e)}
    assert used - RUN_SERIES <= {
        "tpmledger_ingest_requests_total",
        "tpmledger_ingest_spans_stored_total",
        "tpmledger_ingest_spans_rejected_total",
        "tpmledger_ingest_queue_depth_spans",
        "tpmledger_server_requests_waiting",
        "tpmledger_server_requests_running",
        "tpmledger_server_kv_cache_usage_ratio",
        "tpmledger_server_saturated",
    }
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]


def test_monitoring_profile_mounts_the_deploy_files() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    monitoring = {n for n, s in services.items() if "monitoring" in s.get("profiles", [])}
    assert monitoring == {"prometheus", "alertmanager", "grafana"}
    for name in monitoring:
        for volume in services[name]["volumes"]:
            host = volume.split(":")[0]
            if host.startswith("./"):
                assert (ROOT / host).exists(), f"{name}: {host} missing"
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    mounts = {v.split(":")[1] for v in services["prometheus"]["volumes"]}
    assert set(prometheus["rule_files"]) <= mounts
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == ["ingest:4318"]
    assert prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "alertmanager:9093"
    ]
    secret = prometheus["scrape_configs"][0]["authorization"]["credentials_file"]
    assert secret == "/run/secrets/" + services["prometheus"]["secrets"][0]
