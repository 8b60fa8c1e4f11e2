"""tpmledger prune: old runs are sealed, archived with a verifiable compressed event file,
and their raw spans deleted; recent runs are untouched; a dry run changes nothing."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.proofs.verification import verify_run
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.cli.main import main
from tpmledger.provenance.summary_verify import verify_archive, verify_export
from tpmledger.storage.readers.snapshots_read import latest_snapshot
from tpmledger.storage.server.database import in_one_snapshot, raw_transaction

SECOND = 1_000_000_000


def arrived_days_ago(url: str, run_id: str, days: int) -> None:
    """Make the run's spans look as if they had arrived ``days`` ago (retention goes by
    arrival: ``runs.updated_at``)."""
    with raw_transaction(url) as conn:
        # Read, then set: Citus runs no STABLE function over a column in an UPDATE.
        row = conn.execute("SELECT updated_at FROM runs WHERE run_id = %s", (run_id,)).fetchone()
        assert row is not None
        conn.execute(
            "UPDATE runs SET updated_at = %s WHERE run_id = %s",
            (row[0] - timedelta(days=days), run_id),
        )


def _attempts(url: str, run_id: str) -> int:
    with raw_transaction(url) as conn:
        row = conn.execute("SELECT count(*) FROM attempts WHERE run_id = %s", (run_id,)).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def runs(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_DATA_DIR", str(tmp_path / "data"))
    old = [
        attempt_row(
            run_id="old-run",
            start_ns=BASE_NS + i * 7 * SECOND,
            end_ns=BASE_NS + (i * 7 + 2) * SECOND,
        )
        for i in range(30)
    ]
    now = time.time_ns()
    recent = [attempt_row(run_id="new-run", start_ns=now - 5 * SECOND, end_ns=now - SECOND)]
    store(database_url, old)
    arrived_days_ago(database_url, "old-run", 40)
    store(database_url, recent)
    return tmp_path / "archive"


def test_a_dry_run_changes_nothing(
    runs: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["prune", "--older-than", "30d", "--archive-dir", str(runs), "--dry-run", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["dry_run"] is True
    assert [(r["run_id"], r["action"]) for r in report["runs"]] == [("old-run", "would archive")]
    assert not runs.exists()
    assert _attempts(database_url, "old-run") == 30


@pytest.mark.slow
def test_pruning_leaves_a_verifiable_archive_and_a_listed_run(
    runs: Path,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TPMLEDGER_LOG_ORIGIN", "ledger.example.org")
    # Serving-side minutes of the old run's time go with it; one of now stays.
    for minute_ns in (BASE_NS, BASE_NS + 60 * SECOND, time.time_ns()):
        _server_minute(database_url, minute_ns)
    assert main(["prune", "--older-than", "30d", "--archive-dir", str(runs), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["server_minutes"] == 2 and _server_minutes(database_url) == 1
    [pruned] = json.loads(out)["runs"]
    assert pruned["action"] == "archived" and pruned["rows_deleted"] == 30
    assert "old-run: archived" in err  # a progress line per run
    archive = Path(pruned["archive_dir"])
    assert (archive / "events.jsonl.gz").is_file() and not (archive / "events.jsonl").exists()
    sealed = in_one_snapshot(database_url, latest_snapshot, "old-run")
    assert sealed is not None
    events = gzip.decompress((archive / "events.jsonl.gz").read_bytes())
    assert hashlib.sha256(events).hexdigest() == sealed.events_sha256 == pruned["events_sha256"]
    assert verify_export(archive).ok
    assert main(["summary", "verify", str(archive)]) == 0
    # The archive's checkpoint names the configured log (docs/provenance.md#checkpoints).
    origin = (archive / "checkpoint").read_text().splitlines()[0]
    assert origin == "ledger.example.org/tpmledger/runs/old-run"
    # Raw spans gone; the recent run untouched; both still listed.
    assert _attempts(database_url, "old-run") == 0
    assert _attempts(database_url, "new-run") == 1
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    status = {r["run_id"]: r["status"] for r in listed}
    assert status == {"old-run": "archived", "new-run": "live"}
    # What each run still takes: the archived one only its seals and minute rows.
    sizes = {r["run_id"]: r["stored_bytes"] for r in listed}
    assert sizes["old-run"] > 0 and sizes["new-run"] > 0
    # tpmledger verify says where the archive is; analyze refuses to seal an empty run.
    notes = " ".join(in_seal_view(database_url, verify_run, "old-run").notes)
    assert "raw spans were pruned" in notes and str(archive) in notes
    assert main(["analyze", "old-run"]) == 2
    assert "was archived" in capsys.readouterr().err
    # A second prune has nothing left to do.
    assert main(["prune", "--older-than", "30d", "--archive-dir", str(runs)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_archive_folders_stay_inside_the_archive_and_never_collide(tmp_path: Path) -> None:
    from tpmledger.analytics.proofs.run_archive import archive_path

    assert archive_path(tmp_path, "run-1").name.startswith("run-1-")
    for hostile in ("..", "../../etc", "a/b", ".", "x" * 512, "é/" * 300):
        folder = archive_path(tmp_path, hostile)
        assert folder.parent == tmp_path and folder.name not in (".", "..")
        assert len(folder.name.encode()) < 100
    assert archive_path(tmp_path, "a/b") != archive_path(tmp_path, "a_b")
    # The round-2 collision: an id equal to another's old folder name.
    first = archive_path(tmp_path, "col/x")
    assert archive_path(tmp_path, first.name) != first


@pytest.mark.slow
def test_one_bad_run_never_stops_the_others(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Round-2 reproduction: a run longer than 31 days (RunTooLong) or with a 512-character
    id (File name too long) crashed prune and every later run was skipped."""
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_DATA_DIR", str(tmp_path / "data"))
    day = 86_400 * SECOND
    too_long = [
        attempt_row(run_id="a-too-long", start_ns=BASE_NS, end_ns=BASE_NS + SECOND),
        attempt_row(run_id="a-too-long", start_ns=BASE_NS + 40 * day, end_ns=BASE_NS + 40 * day),
    ]
    long_id = "b" + "x" * 511
    rows = [
        *too_long,
        attempt_row(run_id=long_id, start_ns=BASE_NS, end_ns=BASE_NS + SECOND),
        attempt_row(run_id="c-fine", start_ns=BASE_NS, end_ns=BASE_NS + SECOND),
    ]
    store(database_url, rows)
    for run_id in ("a-too-long", long_id, "c-fine"):
        arrived_days_ago(database_url, run_id, 40)
    archive = tmp_path / "archive"
    code = main(["prune", "--older-than", "30d", "--archive-dir", str(archive), "--json"])
    out, err = capsys.readouterr()
    actions = {r["run_id"]: r["action"] for r in json.loads(out)["runs"]}
    assert code == 1  # a run was kept: the operator is told
    assert actions[long_id] == "archived" and actions["c-fine"] == "archived"
    assert actions["a-too-long"].startswith("kept: RunTooLong")
    assert "a-too-long: kept" in err and "Traceback" not in err
    assert _attempts(database_url, "c-fine") == 0  # pruned although an earlier run failed
    assert _attempts(database_url, long_id) == 0
    assert _attempts(database_url, "a-too-long") == 2  # kept, tried again next prune


@pytest.mark.slow
def test_a_folder_of_another_run_is_never_reused(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tpmledger.analytics.proofs.run_archive import RUN_MARKER, archive_path

    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_DATA_DIR", str(tmp_path / "data"))
    store(database_url, [attempt_row(run_id="victim", start_ns=BASE_NS, end_ns=BASE_NS + SECOND)])
    arrived_days_ago(database_url, "victim", 40)
    archive = tmp_path / "archive"
    taken = archive_path(archive, "victim")
    taken.mkdir(parents=True)
    (taken / RUN_MARKER).write_text("someone-else")
    code = main(["prune", "--older-than", "30d", "--archive-dir", str(archive), "--json"])
    [kept] = json.loads(capsys.readouterr().out)["runs"]
    assert code == 1 and kept["action"].startswith("kept") and "someone-else" in kept["action"]
    assert (taken / RUN_MARKER).read_text() == "someone-else"
    assert _attempts(database_url, "victim") == 1


def _change_one_event_byte(archive: Path) -> None:
    """One byte of the event file's content changed, written back as valid gzip."""
    events = bytearray(gzip.decompress((archive / "events.jsonl.gz").read_bytes()))
    at = events.index(b'"run_id":"old-run"') + len(b'"run_id":"o')
    events[at] = ord("O")
    (archive / "events.jsonl.gz").write_bytes(gzip.compress(bytes(events)))


def _flip_one_gzip_byte(archive: Path) -> None:
    packed = bytearray((archive / "events.jsonl.gz").read_bytes())
    packed[len(packed) // 2] ^= 0x01
    (archive / "events.jsonl.gz").write_bytes(bytes(packed))


def _flip_one_signature_byte(archive: Path) -> None:
    path = archive / "summary.dsse.json"
    envelope = json.loads(path.read_bytes())
    signature = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    signature[0] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(signature)).decode()
    path.write_text(json.dumps(envelope))


def _change_one_proven_leaf(archive: Path) -> None:
    path = archive / "minute-proofs.json"
    proofs = json.loads(path.read_bytes())
    proofs["minutes"][0]["leaf"]["calls_in_minute"] += 1
    path.write_text(json.dumps(proofs))


@pytest.mark.parametrize(
    ("corrupt", "failed"),
    [
        (_change_one_event_byte, "events digest"),
        (_flip_one_gzip_byte, "events digest"),
        (_flip_one_signature_byte, "signature"),
        (_change_one_proven_leaf, "minute proofs"),
    ],
)
@pytest.mark.slow
def test_a_corrupted_archive_keeps_the_runs_spans_with_a_reason(
    runs: Path,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    corrupt: Callable[[Path], None],
    failed: str,
) -> None:
    """prune's bounded archive check (digest, signature, proofs; no recomputation) refuses
    an archive damaged between writing and deleting: the spans stay, the reason is said."""
    from tpmledger.analytics.proofs import run_archive

    written = run_archive.write_export

    def write_then_corrupt(summary: Any, target: Path) -> None:
        written(summary, target)
        corrupt(target)

    monkeypatch.setattr(run_archive, "write_export", write_then_corrupt)
    code = main(["prune", "--older-than", "30d", "--archive-dir", str(runs), "--json"])
    out, err = capsys.readouterr()
    [kept] = json.loads(out)["runs"]
    assert code == 1
    assert kept["action"] == f"kept: archive does not verify ({failed})"
    assert "its spans are kept" in err and "Traceback" not in err
    assert _attempts(database_url, "old-run") == 30
    assert not verify_archive(Path(kept["archive_dir"])).ok
    assert not verify_export(Path(kept["archive_dir"])).ok  # the full verifier agrees


def _server_minute(url: str, minute_ns: int) -> None:
    with raw_transaction(url) as conn:
        conn.execute(
            "INSERT INTO server_metric_minutes (instance, engine, model, run_id, minute_utc) "
            "VALUES ('gpu-1:8000', 'vllm', 'm', '', to_timestamp(%s / 1e9))",
            (minute_ns,),
        )


def _server_minutes(url: str) -> int:
    with raw_transaction(url) as conn:
        row = conn.execute("SELECT count(*) FROM server_metric_minutes").fetchone()
    return int(row[0]) if row else 0


def test_serving_side_minutes_go_only_where_no_stored_run_needs_them(
    runs: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two minutes of the old run's time, one 2 days ago (inside the retention), one of now.
    for minute_ns in (BASE_NS, BASE_NS + 60 * SECOND, time.time_ns() - 2 * 86_400 * SECOND):
        _server_minute(database_url, minute_ns)
    _server_minute(database_url, time.time_ns())
    assert main(["prune", "--older-than", "30d", "--archive-dir", str(runs), "--dry-run",
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["server_minutes"] == 2
    assert _server_minutes(database_url) == 4  # a dry run deletes nothing
    # While the old run's spans stay (here: a prune with a cutoff it is not due by), its
    # server minutes stay too, though they are older than that cutoff.
    assert main(["prune", "--older-than", "60d", "--archive-dir", str(runs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["server_minutes"] == 0
    assert _server_minutes(database_url) == 4
