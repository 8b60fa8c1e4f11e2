#!/usr/bin/env bash
# Install what the tests need on a fresh machine, then run every quality gate and the tests.
#   bash scripts/test.sh                # everything
#   bash scripts/test.sh --fast         # the same gates, tests marked slow or browser left out
#   bash scripts/test.sh -k ingest      # extra arguments go to pytest
#   bash scripts/test.sh --fast -k ingest
set -euo pipefail
cd "$(dirname "$0")/.."

markers=()
if [ "${1:-}" = "--fast" ]; then
    shift
    markers=(-m "not slow and not browser")
fi

# Browser tests drive Debian's Chromium through its chromedriver (not needed with --fast).
if [ ${#markers[@]} -eq 0 ] && { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; }; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "note: chromium/chromium-driver missing and not root: browser tests will be skipped"
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
.venv/bin/python -m pip install -q -e '.[test]'

echo "== ruff check";        .venv/bin/ruff check .
echo "== ruff format --check"; .venv/bin/ruff format --check .
echo "== mypy";              .venv/bin/mypy
echo "== pytest ${markers[*]+${markers[*]}}"; .venv/bin/pytest ${markers[@]+"${markers[@]}"} "$@"
