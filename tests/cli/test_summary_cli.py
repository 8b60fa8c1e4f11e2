"""``tpmledger summary show|export|verify|prove`` through the real parser and a real database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.provenance.sharded_run import RUN_ID, store_sharded_run
from tpmledger.cli.main import main


@pytest.fixture
def data_dir(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    store_sharded_run(database_url)
    return tmp_path / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_export_then_verify_then_tamper(
    data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out_dir = tmp_path / "export"
    code, out, err = run(
        capsys, "summary", "export", RUN_ID, "--out", str(out_dir), "--data-dir", str(data_dir)
    )
    assert code == 0, err
    assert "summary.dsse.json" in out
    code, out, _ = run(
        capsys, "summary", "verify", str(out_dir), "--key", str(out_dir / "service.pub")
    )
    assert code == 0, out
    assert out.count("PASS") == 11 and out.rstrip().endswith("verified")  # 9 + 2
    code, out, _ = run(capsys, "summary", "verify", str(out_dir), "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    # `--key service.pub` from the export's parent (as the docs show it): found inside DIR.
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "summary", "verify", "export", "--key", "service.pub")
    assert code == 0, out
    code, _, err = run(capsys, "summary", "verify", "export", "--key", "nowhere.pub")
    assert code == 2 and "--key is a path from the current directory" in err

    events = out_dir / "events.jsonl"
    data = bytearray(events.read_bytes())
    data[100] ^= 0x01
    events.write_bytes(bytes(data))
    code, out, _ = run(capsys, "summary", "verify", str(out_dir))
    assert code == 1
    assert "FAIL  events digest: events.jsonl does not match the signed subject" in out
    assert "NOT verified: events digest" in out


@pytest.mark.slow
def test_show_prints_the_human_block(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "summary", "show", RUN_ID, "--data-dir", str(data_dir))
    assert code == 1 and "no sealed snapshot" in err  # show never seals by itself
    assert (
        run(
            capsys,
            "summary",
            "export",
            RUN_ID,
            "--out",
            str(data_dir / "x"),
            "--data-dir",
            str(data_dir),
        )[0]
        == 0
    )
    code, out, _ = run(capsys, "summary", "show", RUN_ID, "--data-dir", str(data_dir))
    assert code == 0
    assert f"run_id: {RUN_ID}\n" in out and "  minute_utc: 2026-02-01T03:48:00Z\n" in out
    code, out, _ = run(capsys, "summary", "show", RUN_ID, "--json", "--data-dir", str(data_dir))
    assert json.loads(out)["peak_minute"]["shard_count"] == 8


@pytest.mark.slow
def test_prove_one_minute_and_verify_the_proof_file(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proof = tmp_path / "minute.json"
    code, _, err = run(
        capsys,
        "summary",
        "prove",
        RUN_ID,
        "--minute",
        "2026-02-01T03:44:00Z",
        "--out",
        str(proof),
        "--data-dir",
        str(data_dir),
    )
    assert code == 0, err
    key = data_dir / "keys" / "signing.pub"
    code, out, _ = run(capsys, "summary", "verify", str(proof), "--key", str(key))
    assert code == 0, out
    assert "PASS  minute proof: minute 2026-02-01T03:44:00Z" in out
    # Without a key beside the file or --key, nothing is trusted.
    code, out, _ = run(capsys, "summary", "verify", str(proof))
    assert code == 1 and "FAIL  key" in out
    code, _, err = run(
        capsys,
        "summary",
        "prove",
        RUN_ID,
        "--minute",
        "2026-02-01T09:00:00Z",
        "--data-dir",
        str(data_dir),
    )
    assert code == 1 and "no minute 2026-02-01T09:00:00Z" in err


@pytest.mark.slow
def test_unknown_run_is_an_error_not_a_crash(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys,
        "summary",
        "export",
        "no-such-run",
        "--out",
        str(tmp_path / "o"),
        "--data-dir",
        str(data_dir),
    )
    assert code == 1 and "no-such-run" in err
