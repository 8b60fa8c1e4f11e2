from pathlib import Path

import pytest

from tpmledger.settings import Settings, UnsafeConfiguration

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_environment_prefix_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPMLEDGER_HTTP_PORT", "14318")
    monkeypatch.delenv("TPMLEDGER_DATABASE_URL", raising=False)
    settings = Settings()
    assert settings.http_port == 14318
    assert settings.host == "127.0.0.1"
    assert settings.database_url is None
    assert settings.api_base_url == "http://127.0.0.1:14318"


def test_tokens_file_joins_configured_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("# ingest tokens\nalpha\n\n  beta  \n")
    settings = Settings(ingest_tokens=["gamma"], ingest_tokens_file=tokens)
    assert settings.ingest_tokens == ["gamma", "alpha", "beta"]


def test_unreadable_tokens_file_is_refused_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="TPMLEDGER_INGEST_TOKENS_FILE"):
        Settings(ingest_tokens_file=tmp_path / "missing.txt")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_bind_needs_no_token(host: str) -> None:
    Settings(host=host).check_bind_is_safe(has_tokens=False)


def test_public_bind_without_token_is_refused_unless_insecure() -> None:
    with pytest.raises(UnsafeConfiguration, match="--insecure"):
        Settings(host="0.0.0.0").check_bind_is_safe(has_tokens=False)
    Settings(host="0.0.0.0").check_bind_is_safe(has_tokens=True)
    Settings(host="0.0.0.0", insecure=True).check_bind_is_safe(has_tokens=False)


def test_every_setting_is_documented() -> None:
    text = DOC.read_text()
    missing = [
        f"TPMLEDGER_{name.upper()}"
        for name in Settings.model_fields
        if f"TPMLEDGER_{name.upper()}" not in text
    ]
    assert not missing, f"add to docs/configuration.md: {missing}"
