#!/usr/bin/env bash
# The Citus lane of scripts/test.sh (root only): installs Citus 12.1 into Debian's
# postgresql-15 from the project's shared test folder, starts a coordinator and two workers
# on loopback, and runs the suites that matter on a distributed database against the
# coordinator (docs/operations.md#scaling-out). Not part of the product: users install
# Citus from its own packages.
#   bash scripts/citus-lane.sh [pytest args]
# TPMLEDGER_CITUS_DIR: the folder holding install.sh and cluster.sh (default ../shared/citus).
set -euo pipefail
cd "$(dirname "$0")/.."
citus=${TPMLEDGER_CITUS_DIR:-../shared/citus}
if [ ! -x "$citus/cluster.sh" ] && [ ! -f "$citus/cluster.sh" ]; then
    echo "note: $citus/cluster.sh not found: Citus lane skipped"; exit 0
fi
bash "$citus/install.sh"
dir=$(mktemp -d /tmp/tpmledger-citus-XXXXXX)
port=${TPMLEDGER_CITUS_PORT:-55435}
stop() { bash "$citus/cluster.sh" stop "$dir" || true; rm -rf "$dir"; }
trap stop EXIT
if ! url=$(bash "$citus/cluster.sh" start "$dir" "$port" 2); then
    # The prebuilt citus.so must match the installed postgresql-15's minor release; when it
    # does not load ("undefined symbol"), build the source beside it (~15 min on 2 cores).
    if grep -qs "undefined symbol" "$dir"/node-*.log; then
        echo "citus: the prebuilt build does not load here; building the source"
        rm -f /usr/lib/postgresql/15/lib/citus.so
        work=$(mktemp -d)
        tar -xzf "$citus"/citus-12.1.12.tar.gz -C "$work"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-server-dev-15 \
            libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev \
            libxslt1-dev libpam0g-dev libreadline-dev >/dev/null
        (cd "$work"/citus-12.1.12 && nice -n 19 ./configure PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config \
            >/dev/null && nice -n 19 make -j"$(nproc)" with_llvm=no >/dev/null \
            && make install with_llvm=no >/dev/null)
        rm -rf "$work" "$dir"; dir=$(mktemp -d /tmp/tpmledger-citus-XXXXXX)
        url=$(bash "$citus/cluster.sh" start "$dir" "$port" 2)
    else
        cat "$dir"/node-*.log >&2; exit 1
    fi
fi
echo "== pytest against the Citus coordinator $url"
started=$(date +%s)
# A focused subset (the whole suite on a cluster would take longer than CI allows): the
# layout and same-bytes tests, idempotent ingest under faults, live/seal/verify, prune, the
# read API and /metrics, replicas; HTTP attempts live and sealed, GenAI token and server
# metrics, a large run's load in one snapshot, compare routes and the dashboard's run
# records. The PostgreSQL-restart and database-outage tests run their own single-node
# servers, so they are left to the main lane.
TPMLEDGER_TEST_ADMIN_URL=$url "${TPMLEDGER_TEST_VENV:-.venv-test}/bin/pytest" -p no:cacheprovider \
    tests/storage/server/test_distribution.py \
    tests/storage/test_citus_same_bytes.py \
    tests/storage/writers/test_bulk_writer.py \
    tests/storage/test_run_wait_repair_migration.py \
    tests/ingest/test_faults.py \
    --deselect tests/ingest/test_faults.py::test_postgres_restart_during_load_loses_nothing \
    tests/ingest/test_grpc_ingest.py \
    --deselect tests/ingest/test_grpc_ingest.py::test_database_outage_answers_unavailable_with_retry_info \
    tests/analytics/live/test_live_updater.py \
    tests/analytics/seal/test_sealing.py \
    tests/analytics/seal/test_checkpoints.py::test_a_checkpoint_exports_and_verifies_after_the_run_grew \
    tests/provenance/test_summary_export_verify.py::test_round_trip_export_then_verify_passes \
    tests/analytics/proofs/test_run_archive.py::test_a_dry_run_changes_nothing \
    tests/analytics/proofs/test_run_archive.py::test_pruning_leaves_a_verifiable_archive_and_a_listed_run \
    tests/read_api/test_runs_routes.py \
    tests/ingest/test_run_metrics.py \
    tests/analytics/test_replicas.py \
    tests/ingest/test_attempt_delivery.py::test_any_delivery_order_counts_each_attempt_once \
    tests/ingest/test_other_signals.py \
    tests/dashboard/pages/test_serving_panel.py \
    tests/storage/readers/test_attempt_frames.py::test_split_fetch_reads_both_halves_in_one_snapshot \
    tests/read_api/test_compare_routes.py \
    tests/dashboard/test_run_records.py \
    "$@"
echo "== Citus lane: $(( $(date +%s) - started )) s of tests"
