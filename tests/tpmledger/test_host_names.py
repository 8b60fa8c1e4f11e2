"""The Host-name rule shared by ingest and the dashboard (tpmledger/host_names.py)."""

from __future__ import annotations

from tpmledger.host_names import HostNames, host_name


def test_host_name_drops_port_brackets_case_and_the_root_dot() -> None:
    assert host_name("Example.COM.:8050") == "example.com"
    assert host_name("[::1]:4318") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("127.0.0.1") == "127.0.0.1"


def test_without_tokens_loopback_the_bind_address_and_allowed_names_pass() -> None:
    hosts = HostNames("10.0.0.5", ["ledger.example"])
    for ok in ("localhost", "127.0.0.1:1", "[::1]:2", "app.localhost", "10.0.0.5:8050",
               "ledger.example", None, ""):  # fmt: skip
        assert hosts.serves(ok, tokens_required=False), ok
    for refused in ("evil.example", "127.0.0.1.evil.example", "10.0.0.6", "ledger.example.evil"):
        assert not hosts.serves(refused, tokens_required=False), refused
    # An explicit list is enforced with tokens too; without one, tokens guard alone.
    assert not hosts.serves("evil.example", tokens_required=True)
    assert HostNames("0.0.0.0").serves("anything.example", tokens_required=True)
    assert not HostNames("0.0.0.0").serves("anything.example", tokens_required=False)
    assert HostNames("127.0.0.1", ["*"]).serves("anything.example", tokens_required=False)
