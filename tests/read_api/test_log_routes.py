"""A run's log served by a really running server: checkpoints, tiles, proofs from the served
tiles alone, and a witness following a live run v1 → v2 → v3 that refuses a rebase and a
fork (docs/provenance.md#checkpoints, #tiles, #witnessing)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.analytics.proofs.test_version_consistency import _calls
from tests.analytics.seeding import store
from tests.fixtures.servers import RunningIngest, start_ingest
from tests.provenance import independent_checkpoint as independent
from tpmledger.analytics.seal.checkpoints import Checkpointer
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.cli.main import main
from tpmledger.provenance.checkpoint import Checkpoint, sign_checkpoint
from tpmledger.provenance.merkle import leaf_hash, verify_consistency, verify_inclusion
from tpmledger.provenance.signing_keys import load_or_create_signing_key
from tpmledger.provenance.tile_proofs import TiledTree
from tpmledger.provenance.tile_source import HttpTiles
from tpmledger.provenance.tiles import tree_tile_files
from tpmledger.provenance.witness import read_state
from tpmledger.settings import Settings

NOW = datetime(2026, 2, 1, 3, 50, 30, tzinfo=UTC)  # minutes 03:44 .. 03:47 are closed
ORIGIN = "ledger.test/tpmledger/runs/grow"


@pytest.fixture
def served(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningIngest]:
    env = {"TPMLEDGER_DATA_DIR": str(tmp_path / "data"), "TPMLEDGER_LOG_ORIGIN": "ledger.test"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    server = start_ingest(database_url, env=env)
    try:
        yield server
    finally:
        server.stop()


class Witness:
    """The ``tpmledger witness`` command as a third party runs it."""

    def __init__(self, tmp_path: Path, log_vkey: str, capsys: pytest.CaptureFixture[str]):
        tmp_path.mkdir(exist_ok=True)
        self.key = tmp_path / "witness.key"
        self.state = tmp_path / "witness-state"
        self.log_vkey = log_vkey
        self.capsys = capsys
        self.tmp_path = tmp_path
        assert main(["witness", "keygen", "witness.test/w1", "--out", str(self.key)]) == 0
        self.vkey = capsys.readouterr().out.strip()

    def cosign(self, checkpoint: bytes | str, tiles: str, name: str) -> tuple[int, str, str]:
        path = self.tmp_path / f"{name}.checkpoint"
        path.write_bytes(checkpoint if isinstance(checkpoint, bytes) else checkpoint.encode())
        code = main(
            ["witness", "cosign", "--log-key", self.log_vkey, "--key", str(self.key),
             "--state", str(self.state), "--tiles", tiles, str(path)]
        )  # fmt: skip
        out, err = self.capsys.readouterr()
        return code, out, err


def _b64(hex_root: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_root)).decode()


@pytest.mark.slow
def test_a_witness_follows_a_live_run_and_refuses_a_rebase_and_a_fork(
    served: RunningIngest,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, prefix = served.http_url, f"{served.http_url}/v1/runs/grow/"
    checkpointer = Checkpointer(database_url, every_s=0, quiet_s=3600, close_after_s=120)
    store(database_url, _calls(range(5)))
    [v1] = checkpointer.poll_once(now=NOW)

    keys = httpx.get(f"{api}/v1/keys", params={"run": "grow"}).json()["keys"]
    log_vkey = keys[0]["note_verifier_key"]
    assert keys[0]["checkpoint_origin"] == ORIGIN and log_vkey.startswith(ORIGIN + "+")
    assert main(["keys", "show", "--run", "grow", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["keys"][0]
    assert shown["note_verifier_key"] == log_vkey

    witness = Witness(tmp_path, log_vkey, capsys)

    def checkpoint(version: int) -> bytes:
        answer = httpx.get(f"{prefix}checkpoint", params={"version": version})
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        return answer.content

    # v1 (a checkpoint of the live run: 4 closed minutes) — the independent reader agrees.
    code, cosigned, err = witness.cosign(checkpoint(v1.version), prefix, "v1")
    assert code == 0, err
    assert independent.read_checkpoint(cosigned, log_vkey) == (
        ORIGIN,
        4,
        bytes.fromhex(v1.document["minutes"]["merkle_root"]),
    )
    assert independent.cosigned_at(cosigned, witness.vkey) > 0

    # v2: the next closed minute; v3: the run ends with two more minutes.
    [v2] = checkpointer.poll_once(now=NOW.replace(minute=51))
    code, cosigned, err = witness.cosign(checkpoint(v2.version), prefix, "v2")
    assert code == 0, err
    store(database_url, _calls(range(5, 7)))
    v3 = seal_run(database_url, "grow")
    latest = httpx.get(f"{prefix}checkpoint")
    assert latest.headers["cache-control"] == "no-cache"
    assert latest.content == checkpoint(v3.version)
    code, cosigned, err = witness.cosign(latest.content, prefix, "v3")
    assert code == 0, err
    assert independent.read_checkpoint(cosigned, log_vkey)[1] == 7

    # Proofs from the served tiles alone, checked against the signed roots.
    root1 = bytes.fromhex(v1.document["minutes"]["merkle_root"])
    root3 = bytes.fromhex(v3.document["minutes"]["merkle_root"])
    tree = TiledTree(HttpTiles(prefix), 7)
    assert verify_consistency(4, 7, root1, root3, tree.consistency_proof(4))
    entries = tree.entries(0)
    for index, entry in enumerate(entries):
        proof = tree.inclusion_proof(index)
        assert verify_inclusion(index, 7, leaf_hash(entry), proof, root3)
    assert json.loads(entries[0])["minute_utc"] == "2026-02-01T03:44:00Z"
    assert (
        independent.root_of_entries(
            independent.entries_from_tiles(lambda p: httpx.get(prefix + p).content, 7)
        )
        == root3
    )
    tile = httpx.get(f"{prefix}tile/0/000.p/4")  # v1's partial tile, still served
    assert tile.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert tile.headers["content-type"] == "application/octet-stream"
    assert tile.content == b"".join(tree.leaf_hash(i) for i in range(4))
    assert httpx.get(f"{prefix}tile/0/000.p/8").status_code == 404
    assert httpx.get(f"{prefix}tile/0/0.p/4").status_code == 400

    # A fork: the log key signs another tree of the same origin (published with its tiles).
    key = load_or_create_signing_key(Settings(data_dir=tmp_path / "data"))  # type: ignore[call-arg]
    forked = [b"forged minute %d" % i for i in range(9)]
    fork_dir = tmp_path / "fork"
    for ref, data in tree_tile_files([leaf_hash(e) for e in forked], forked):
        (fork_dir / ref.path).parent.mkdir(parents=True, exist_ok=True)
        (fork_dir / ref.path).write_bytes(data)
    fork_root = independent.root_of_entries(forked)
    fork = sign_checkpoint(Checkpoint(ORIGIN, 9, fork_root), key.private_key)
    code, out, err = witness.cosign(fork, str(fork_dir), "fork")
    assert code == 1 and out == ""
    assert "size 9" in err and base64.b64encode(fork_root).decode() in err
    assert "size 7" in err and _b64(v3.document["minutes"]["merkle_root"]) in err
    assert len(err.strip().splitlines()) == 1

    # A rebase: a late call changes minute 03:45 and the run gains a minute.
    store(database_url, _calls(range(1, 2), second=30) + _calls(range(7, 8)))
    v4 = seal_run(database_url, "grow")
    assert v4.document.get("rebased")
    code, out, err = witness.cosign(checkpoint(v4.version), prefix, "v4")
    assert code == 1 and out == ""
    assert "size 8" in err and _b64(v4.document["minutes"]["merkle_root"]) in err
    assert "size 7" in err and _b64(v3.document["minutes"]["merkle_root"]) in err
    # The witness still holds v3: the refused checkpoints changed nothing.
    assert read_state(witness.state, ORIGIN) == Checkpoint(ORIGIN, 7, root3)
    # v3 again is the same tree head: cosigned again (no tiles needed).
    code, _, err = witness.cosign(checkpoint(v3.version), prefix, "v3-again")
    assert code == 0, err
    # The rebased log no longer serves v3's tree: a new witness cannot start from v3.
    fresh = Witness(tmp_path / "fresh", log_vkey, capsys)
    code, _, err = fresh.cosign(checkpoint(v3.version), prefix, "v3-fresh")
    assert code == 1 and "tiles do not hold" in err


def test_unsealed_runs_and_bad_tile_paths(database_url: str, tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    import tpmledger.read_api as read_api

    settings = Settings(data_dir=tmp_path, log_origin="ledger.test/")  # type: ignore[call-arg]
    app = FastAPI()
    app.include_router(read_api.build_router(database_url, settings))
    client = TestClient(app)
    assert client.get("/v1/runs/nothing/checkpoint").status_code == 404
    assert client.get("/v1/runs/nothing/tile/0/000.p/1").status_code == 404
    assert client.get("/v1/runs/nothing/tile/0/x000/000").status_code == 400
    store(database_url, _calls(range(3)))
    seal_run(database_url, "grow")
    assert client.get("/v1/runs/grow/checkpoint", params={"version": 2}).status_code == 404
    text = client.get("/v1/runs/grow/checkpoint").text
    assert text.startswith(ORIGIN + "\n3\n")
    [key] = client.get("/v1/keys", params={"run": "a b+c"}).json()["keys"]
    assert key["checkpoint_origin"] == "ledger.test/tpmledger/runs/a%20b%2Bc"
    assert client.get("/v1/keys").json()["keys"][0].keys() == {"fingerprint", "current", "pem"}
    bundle = client.get("/v1/runs/grow/tile/entries/000.p/3")
    assert bundle.status_code == 200 and bundle.content.count(b"minute_utc") == 3
    assert bundle.headers["content-encoding"] == "gzip"  # decoded by the client
    plain = client.get(
        "/v1/runs/grow/tile/entries/000.p/3", headers={"Accept-Encoding": "identity"}
    )
    assert "content-encoding" not in plain.headers and plain.content == bundle.content


def test_entry_bundles_are_served_from_stored_leaves_without_the_runs_attempts(
    database_url: str, tmp_path: Path
) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    import tpmledger.read_api as read_api
    from tpmledger.analytics.proofs.run_archive import prune
    from tpmledger.storage.server.database import raw_transaction

    app = FastAPI()
    app.include_router(read_api.build_router(database_url, Settings(data_dir=tmp_path)))  # type: ignore[call-arg]
    client = TestClient(app)
    store(database_url, _calls(range(2)) + _calls(range(4, 7)))  # 03:46, 03:47 are empty
    sealed = seal_run(database_url, "grow")
    root = bytes.fromhex(sealed.document["minutes"]["merkle_root"])

    def served_root() -> bytes:
        fetch = lambda path: client.get(f"/v1/runs/grow/{path}").content  # noqa: E731
        return independent.root_of_entries(independent.entries_from_tiles(fetch, 7))

    assert served_root() == root
    # Prune archives the run and deletes its raw attempts: its entries are still served.
    key = load_or_create_signing_key(Settings(data_dir=tmp_path))  # type: ignore[call-arg]
    [pruned] = prune(database_url, 0, tmp_path / "archive", key).runs
    assert pruned.run_id == "grow"
    with raw_transaction(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM attempts").fetchone() == (0,)
    assert served_root() == root

    # A version sealed before leaves were stored (a copy of the newest, flagged so):
    # its hash tiles are served, its entry bundles refused with what to do.
    with raw_transaction(database_url) as conn:
        columns = (
            "run_id, computed_at, previous_seal, events_sha256, events_count, merkle_root, "
            "tree_size, metrics_sha256, document, metrics, data_as_of, final, leaf_hashes"
        )
        conn.execute(
            f"INSERT INTO snapshots (version, seal, leaves_stored, {columns}) "
            f"SELECT version + 1, seal || '-old', false, {columns} FROM snapshots "
            "WHERE run_id = 'grow' AND version = 1"
        )
    assert client.get("/v1/runs/grow/tile/0/000.p/7").status_code == 200
    refused = client.get("/v1/runs/grow/tile/entries/000.p/7")
    assert refused.status_code == 409
    assert "tpmledger analyze grow --force" in refused.json()["detail"]
