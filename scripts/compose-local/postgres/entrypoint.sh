#!/bin/bash
# Entrypoint of the postgres:16 stand-in (see Dockerfile beside this file): on an empty PGDATA,
# create the cluster with POSTGRES_USER (default postgres) as superuser, POSTGRES_PASSWORD as
# its password (scram-sha-256 for every TCP client; local socket trusted, as upstream) and
# POSTGRES_DB (default: the user's name); then run postgres listening on every address.
# Each of the three may instead be read from the file named by <NAME>_FILE (compose secrets).
# Not carried over from upstream: /docker-entrypoint-initdb.d scripts and POSTGRES_INITDB_ARGS.
set -euo pipefail

file_env() {  # file_env NAME DEFAULT: NAME from itself, else from the file NAME_FILE, else DEFAULT
    local name=$1 file_name="${1}_FILE" value=$2
    if [ -n "${!name:-}" ] && [ -n "${!file_name:-}" ]; then
        echo "error: both $name and $file_name are set (use one)" >&2
        exit 1
    fi
    if [ -n "${!name:-}" ]; then
        value=${!name}
    elif [ -n "${!file_name:-}" ]; then
        value=$(<"${!file_name}")
    fi
    export "$name=$value"
    unset "$file_name"
}

if [ "${1:0:1}" = "-" ]; then
    set -- postgres "$@"
fi
if [ "$1" != "postgres" ]; then
    exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
    # Named volumes arrive owned by root: hand PGDATA to postgres, then run as postgres.
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    file_env POSTGRES_PASSWORD ""
    file_env POSTGRES_USER postgres
    file_env POSTGRES_DB "$POSTGRES_USER"
    auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
    if [ -z "$POSTGRES_PASSWORD" ] && [ "$auth" != trust ]; then
        echo "error: database is uninitialized and POSTGRES_PASSWORD is not set" \
            "(set it, or POSTGRES_PASSWORD_FILE, or POSTGRES_HOST_AUTH_METHOD=trust)" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
        --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host="$auth" >/dev/null
    rm -f "$pwfile"
    printf 'host all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
    printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # Single-user mode: nothing listens (so pg_isready stays "no response") until ready.
        printf 'CREATE DATABASE "%s";\n' "${POSTGRES_DB//\"/\"\"}" |
            postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "stand-in postgres: initialized $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
unset POSTGRES_PASSWORD
exec "$@"
