"""``tpmledger keys show|rotate`` through the real argument parser."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tpmledger.cli.main import main
from tpmledger.provenance.signing_keys import load_public_key_pem


def test_keys_show_creates_key_and_prints_pem_and_fingerprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "show", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fingerprint: ")
    assert "-----BEGIN PUBLIC KEY-----" in out
    assert stat.S_IMODE((tmp_path / "keys" / "signing.key").stat().st_mode) == 0o600


def test_keys_rotate_then_show_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "show", "--data-dir", str(tmp_path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["keys"][0]
    assert main(["keys", "rotate", "--data-dir", str(tmp_path), "--json"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["retired"] == first["fingerprint"]
    assert main(["keys", "show", "--all", "--data-dir", str(tmp_path), "--json"]) == 0
    keys = json.loads(capsys.readouterr().out)["keys"]
    assert [k["fingerprint"] for k in keys] == [rotated["current"], first["fingerprint"]]
    load_public_key_pem(keys[1]["pem"].encode())


def test_keys_rotate_refuses_a_supplied_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TPMLEDGER_SIGNING_KEY_PATH", str(tmp_path / "absent.pem"))
    assert main(["keys", "rotate", "--data-dir", str(tmp_path)]) == 1
    assert "TPMLEDGER_SIGNING_KEY_PATH" in capsys.readouterr().err
