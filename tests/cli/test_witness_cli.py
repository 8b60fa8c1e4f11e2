"""Exported logs: ``summary export --tiles`` as a static log, ``summary checkpoint``, the witness
over exported directories, and ``summary verify DIR --witness`` (docs/provenance.md#witnessing)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.analytics.proofs.test_version_consistency import _calls
from tests.analytics.seeding import store
from tests.fixtures.servers import free_port, terminate, wait_for
from tests.provenance import independent_checkpoint as independent
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.cli.main import main
from tpmledger.provenance.merkle import leaf_hash, verify_consistency, verify_inclusion
from tpmledger.provenance.tile_proofs import TiledTree
from tpmledger.provenance.tile_source import DirectoryTiles

ORIGIN = "ledger.test/tpmledger/runs/grow"


@pytest.fixture
def env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TPMLEDGER_LOG_ORIGIN", "ledger.test")
    return database_url


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().out


@contextmanager
def static_server(folder: Path) -> Iterator[str]:
    """``python -m http.server`` over ``folder``: any web server can publish an export."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1", "-d", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for(lambda: httpx.get(url + "checkpoint", timeout=1).status_code == 200)
        yield url
    finally:
        terminate(process)


def test_exported_versions_are_static_logs_a_witness_cosigns(
    env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ExitStack() as web:
        _exported_versions(env, tmp_path, capsys, web)


def _exported_versions(
    env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], web: ExitStack
) -> None:
    store(env, _calls(range(3)))
    v1 = seal_run(env, "grow")
    store(env, _calls(range(3, 5)))
    v2 = seal_run(env, "grow")
    one, two = tmp_path / "v1", tmp_path / "v2"
    assert main(["summary", "export", "grow", "--version", "1", "--out", str(one), "--tiles"]) == 0
    assert main(["summary", "export", "grow", "--out", str(two), "--tiles"]) == 0
    assert main(["keys", "show", "--run", "grow"]) == 0
    log_vkey = next(
        line.split(": ", 1)[1] for line in _out(capsys).splitlines() if "verifier key" in line
    )
    # The checkpoint of each export, read by the independent implementation.
    root1 = bytes.fromhex(v1.document["minutes"]["merkle_root"])
    root2 = bytes.fromhex(v2.document["minutes"]["merkle_root"])
    assert independent.read_checkpoint((one / "checkpoint").read_text(), log_vkey) == (
        ORIGIN,
        3,
        root1,
    )
    assert independent.root_of_entries(independent.entries_from_tiles(two, 5)) == root2
    # `summary checkpoint` prints the same signed note as the export holds.
    assert main(["summary", "checkpoint", "grow", "--version", "1"]) == 0
    assert _out(capsys) == (one / "checkpoint").read_text()
    # Proofs from the exported tiles only.
    tree = TiledTree(DirectoryTiles(two), 5)
    assert verify_consistency(3, 5, root1, root2, tree.consistency_proof(3))
    for index, entry in enumerate(tree.entries(0)):
        assert verify_inclusion(index, 5, leaf_hash(entry), tree.inclusion_proof(index), root2)
    assert sorted(p.name for p in (two / "tile" / "0").iterdir()) == ["000.p"]

    key, state = tmp_path / "w.key", tmp_path / "state"
    assert main(["witness", "keygen", "witness.test/w1", "--out", str(key)]) == 0
    witness_vkey = _out(capsys).strip()
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("PRIVATE+KEY+witness.test/w1+")
    assert main(["witness", "keygen", "witness.test/w1", "--out", str(key)]) == 2  # no overwrite
    capsys.readouterr()

    # Not yet cosigned: --witness fails, the rest still verifies.
    assert main(["summary", "verify", str(two), "--witness", witness_vkey]) == 1
    assert "FAIL  cosignature" in _out(capsys)
    for folder in (one, two):
        # v1 read from the directory, v2 from a plain static web server over the export.
        tiles = str(folder) if folder == one else web.enter_context(static_server(folder))
        cosign = ["witness", "cosign", "--log-key", log_vkey, "--key", str(key)]
        cosign += ["--state", str(state), "--tiles", tiles, str(folder / "checkpoint")]
        assert main([*cosign, "--out", str(folder / "checkpoint")]) == 0
        capsys.readouterr()
        assert main(["summary", "verify", str(folder), "--witness", witness_vkey, "--json"]) == 0
        checks = {c["name"]: c["ok"] for c in json.loads(_out(capsys))["checks"]}
        assert checks["checkpoint"] and checks["cosignature"]
        assert independent.cosigned_at((folder / "checkpoint").read_text(), witness_vkey) > 0
    # v1 after v2: the witness never goes back.
    assert main([*cosign[:-1], str(one / "checkpoint")]) == 1
    assert "smaller than the size 5" in capsys.readouterr().err

    other = tmp_path / "other.key"
    assert main(["witness", "keygen", "witness.test/w2", "--out", str(other)]) == 0
    assert main(["summary", "verify", str(two), "--witness", _out(capsys).strip()]) == 1
    assert "no cosignature by witness witness.test/w2" in _out(capsys)


@pytest.mark.slow
def test_bad_witness_input_is_one_line(
    env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store(env, _calls(range(3)))
    seal_run(env, "grow")
    out = tmp_path / "export"
    assert main(["summary", "export", "grow", "--out", str(out), "--tiles"]) == 0
    capsys.readouterr()
    assert main(["keys", "show", "--run", "grow", "--json"]) == 0
    log_vkey = json.loads(_out(capsys))["keys"][0]["note_verifier_key"]
    key = tmp_path / "w.key"
    assert main(["witness", "keygen", "witness.test/w1", "--out", str(key)]) == 0
    capsys.readouterr()
    garbage = tmp_path / "garbage"
    garbage.write_text("not a checkpoint\n")
    base = ["witness", "cosign", "--key", str(key), "--state", str(tmp_path / "s")]
    cases = [
        [*base, "--log-key", log_vkey, "--tiles", str(out), str(garbage)],
        [*base, "--log-key", "nope", "--tiles", str(out), str(out / "checkpoint")],
        [*base, "--log-key", log_vkey, "--tiles", str(tmp_path / "none"), str(out / "checkpoint")],
        [*base, "--log-key", log_vkey.replace("grow", "other"), "--tiles", str(out),
         str(out / "checkpoint")],
    ]  # fmt: skip
    for args in cases:
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert main(["summary", "verify", str(out), "--witness", "garbage+1+2"]) == 2
    assert capsys.readouterr().err.startswith("error: --witness")
    assert main(["summary", "checkpoint", "grow", "--version", "9"]) == 1
    assert "no sealed version 9" in capsys.readouterr().err
