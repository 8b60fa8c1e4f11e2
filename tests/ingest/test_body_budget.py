"""The bound on request bodies in flight (ingest/body_budget.py, docs/ingest.md overload)."""

from __future__ import annotations

import gzip
import re
import socket

import httpx
import pytest

from tests.fixtures.servers import RunningIngest, start_ingest, wait_for
from tpmledger.ingest.body_budget import FIRST_CHARGE, BodyBudget
from tpmledger.ingest.error_taxonomy import Overloaded, PayloadTooLarge
from tpmledger.ingest.otlp_http_codec import PROTOBUF, BodyReader

MIB = 1024 * 1024


def test_admits_within_budget_and_releases_on_exit() -> None:
    budget = BodyBudget(1000)
    with budget.hold("600"):
        assert budget.in_use == 600
        with budget.hold("400"):
            assert budget.in_use == 1000
    assert budget.in_use == 0


def test_refuses_past_budget_with_retry_after() -> None:
    budget = BodyBudget(1000, retry_after_s=3)
    with budget.hold("900"), pytest.raises(Overloaded) as refused, budget.hold("200"):
        pass
    assert refused.value.http_status == 503
    assert refused.value.http_headers() == {"Retry-After": "3"}
    assert budget.in_use == 0


def test_a_body_larger_than_the_whole_budget_is_too_large() -> None:
    budget = BodyBudget(1000)
    with pytest.raises(PayloadTooLarge), budget.hold("5000"):
        pass
    assert budget.in_use == 0


def test_a_declared_length_is_not_charged_ahead_of_the_bytes() -> None:
    """Issue 41: a client declaring 16 MiB and sending nothing took the whole budget."""
    budget = BodyBudget(16 * MIB)
    with budget.hold(str(16 * MIB)) as charge:
        assert budget.in_use == FIRST_CHARGE
        with budget.hold(str(8 * MIB)):  # another sender is admitted meanwhile
            assert budget.in_use == 2 * FIRST_CHARGE
        charge.grow_to(MIB)
        assert budget.in_use == MIB
    assert budget.in_use == 0


def test_released_when_the_request_fails() -> None:
    budget = BodyBudget(1000)
    with pytest.raises(RuntimeError), budget.hold("500"):
        raise RuntimeError("decode failed")
    assert budget.in_use == 0


@pytest.mark.parametrize("header", [None, "", "chunked", "-1"])
def test_undeclared_length_is_charged_one_read_then_what_it_holds(header: str | None) -> None:
    budget = BodyBudget(10 * FIRST_CHARGE)
    with budget.hold(header) as charge:
        assert budget.in_use == FIRST_CHARGE
        reader = BodyReader(None, on_growth=charge.grow_to)
        for _ in range(5):
            reader.feed(bytes(FIRST_CHARGE))
        assert budget.in_use == 5 * FIRST_CHARGE
    assert budget.in_use == 0


def _gzip_bomb(inflated: int) -> bytes:
    return gzip.compress(bytes(inflated), compresslevel=9)


def test_a_compressed_body_is_charged_what_it_inflates_to() -> None:
    # 8 MiB of zeros gzip to ~8 KB: the budget used to be charged the 8 KB.
    bomb = _gzip_bomb(8 * MIB)
    budget = BodyBudget(16 * MIB)
    with budget.hold(str(len(bomb))) as charge:
        reader = BodyReader("gzip", on_growth=charge.grow_to)
        for at in range(0, len(bomb), 1024):
            reader.feed(bomb[at : at + 1024])
        assert len(reader.finish()) == 8 * MIB
        assert budget.in_use == 8 * MIB
    assert budget.in_use == 0


def test_a_growing_body_is_refused_once_the_bodies_in_flight_pass_the_budget() -> None:
    budget = BodyBudget(16 * MIB, retry_after_s=3)
    bomb = _gzip_bomb(8 * MIB)
    with budget.hold(str(12 * MIB)) as held, budget.hold(str(len(bomb))) as charge:
        held.grow_to(12 * MIB)  # 12 MiB of another body, received
        reader = BodyReader("gzip", on_growth=charge.grow_to)
        with pytest.raises(Overloaded) as refused:
            reader.feed(bomb)
        assert refused.value.http_headers() == {"Retry-After": "3"}
        assert budget.in_use <= 16 * MIB
    assert budget.in_use == 0


def test_a_body_that_alone_inflates_past_the_budget_is_too_large() -> None:
    # A body alone used to grow up to 64 MiB: one 60 MiB bomb took ingest to 490 MiB.
    budget = BodyBudget(1 * MIB)
    bomb = _gzip_bomb(4 * MIB)
    with budget.hold(str(len(bomb))) as charge:
        reader = BodyReader("gzip", on_growth=charge.grow_to)
        with pytest.raises(PayloadTooLarge):
            reader.feed(bomb)
        assert budget.in_use <= 1 * MIB
    assert budget.in_use == 0


# --- the budget in a real ingest server -----------------------------------------------

_BODY_GAUGE = re.compile(r"^tpmledger_ingest_body_bytes_in_flight (\S+)$", re.MULTILINE)


def _body_bytes_in_flight(server: RunningIngest) -> float:
    text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    match = _BODY_GAUGE.search(text)
    return float(match.group(1)) if match else 0.0


def _held_open_chunked_body(server: RunningIngest, size: int) -> socket.socket:
    """A chunked POST whose first ``size`` bytes are sent and whose end is not."""
    host, port = server.http_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{size:x}\r\n".encode()
        + bytes(size)
        + b"\r\n"
    )
    return sock


@pytest.mark.slow
def test_bodies_held_by_the_server_are_charged_as_they_grow(database_url: str) -> None:
    server = start_ingest(database_url)
    held = None
    try:
        # A chunked body of 12 MiB, still open: it used to be charged 1 MiB.
        held = _held_open_chunked_body(server, 12 * MIB)
        wait_for(lambda: _body_bytes_in_flight(server) >= 12 * MIB, timeout=60)
        with httpx.Client(base_url=server.http_url, timeout=60) as client:
            # 8 KB of gzip that inflates to 8 MiB: it used to be charged 8 KB.
            bomb = client.post(
                "/v1/traces",
                content=_gzip_bomb(8 * MIB),
                headers={"Content-Type": PROTOBUF, "Content-Encoding": "gzip"},
            )
            assert bomb.status_code == 503, bomb.text
            assert bomb.headers["Retry-After"] == "2"
            declared = client.post(
                "/v1/traces", content=bytes(5 * MIB), headers={"Content-Type": PROTOBUF}
            )
            assert declared.status_code == 503
        # The held body, once whole, is read and answered (zeros do not decode: 400).
        held.sendall(b"0\r\n\r\n")
        assert held.recv(64).startswith(b"HTTP/1.1 400")
        wait_for(lambda: _body_bytes_in_flight(server) == 0, timeout=60)
        # Alone, a bomb may inflate up to the budget, not past it (it used to reach 64 MiB).
        alone = httpx.post(
            f"{server.http_url}/v1/traces",
            content=_gzip_bomb(20 * MIB),
            headers={"Content-Type": PROTOBUF, "Content-Encoding": "gzip"},
            timeout=60,
        )
        assert alone.status_code == 413, alone.text
    finally:
        if held is not None:
            held.close()
        server.stop()
