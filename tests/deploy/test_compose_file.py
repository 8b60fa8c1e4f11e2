"""docker-compose.yml is valid Compose and every service runs a real tpmledger command.

Quick checks that need no Docker engine; test_compose_stack.py beside this file runs the
stack itself (scripts/compose-local.sh).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT.parent / "shared" / "schemas" / "compose-spec.json"


def load_compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def tpmledger_commands(compose: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, argv) for every tpmledger command a service or healthcheck runs."""
    found = []
    for name, service in compose["services"].items():
        command = service.get("command")
        if command and command[0] == "tpmledger":
            found.append((f"{name}.command", command))
        test = (service.get("healthcheck") or {}).get("test") or []
        if len(test) > 1 and test[0] == "CMD" and test[1] == "tpmledger":
            found.append((f"{name}.healthcheck", test[1:]))
    return found


@pytest.mark.skipif(not SCHEMA.exists(), reason="../shared/schemas/compose-spec.json not found")
def test_compose_file_matches_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(load_compose(), schema)


def default_services(compose: dict[str, Any]) -> dict[str, Any]:
    """The services `docker compose up` starts (no profile named)."""
    return {n: s for n, s in compose["services"].items() if not s.get("profiles")}


def test_every_tpmledger_service_has_the_expected_shape() -> None:
    services = default_services(load_compose())
    assert set(services) == {"db", "migrate", "ingest", "analytics", "dashboard"}
    assert services["migrate"]["command"] == ["tpmledger", "migrate"]
    for name in ("ingest", "analytics", "dashboard"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
        assert "TPMLEDGER_DATABASE_URL" in services[name]["environment"]
    for port in services["ingest"]["ports"] + services["dashboard"]["ports"]:
        assert port.startswith("${TPMLEDGER_BIND:-127.0.0.1}:"), "ports bind loopback by default"


def _subcommand_prefix(argv: list[str]) -> list[str]:
    """The command words before the first option, e.g. ['serve', 'ingest']."""
    words = []
    for word in argv[1:]:
        if word.startswith("-") or "://" in word:
            break
        words.append(word)
    return words


@pytest.mark.parametrize(
    ("where", "argv"), tpmledger_commands(load_compose()), ids=lambda v: str(v)
)
def test_service_command_is_a_real_subcommand(where: str, argv: list[str]) -> None:
    words = _subcommand_prefix(argv)
    help_argv = [sys.executable, "-m", "tpmledger.cli.main", *words[:1], "--help"]
    result = subprocess.run(help_argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{where}: {' '.join(argv)} --help failed: {result.stderr}"
    # The arguments parse: argparse rejects unknown services, flags and choices with exit 2.
    if words[:1] == ["serve"]:
        assert words[1] in result.stdout, f"{where}: unknown service {words[1]}"
    flags = [w for w in argv[1:] if w.startswith("--")]
    for flag in flags:
        assert flag in result.stdout, f"{where}: {flag} is not an option of {words[0]}"


def test_ingest_and_analytics_declare_replicas_and_ports_that_scale() -> None:
    """docs/operations.md#replicas: replicas never clash on a host port (each takes one of
    a range; one replica by default)."""
    services = load_compose()["services"]
    for name in ("ingest", "analytics"):
        assert str(services[name]["deploy"]["replicas"]).endswith(":-1}")
    for port in services["ingest"]["ports"]:
        bind = "${TPMLEDGER_BIND:-127.0.0.1}:"
        host, container = port.removeprefix(bind).rsplit(":", 1)
        first, last = host.split("}-")
        assert first.startswith("${") and last.startswith("${") and container in ("4317", "4318")
