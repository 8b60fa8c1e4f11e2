"""Guards for every place tpmledger reaches into a dependency's internals (issue 40).

A private attribute or internal class is a contract its library never made. Each reach is
either owned (copied, with a test against the library: ddsketch's mapping in
tests/analytics/kernels/test_value_sketch.py; argparse's subcommand walk replaced by the
documented ``parser_class``) or pinned in pyproject.toml to the tested minor and guarded
here, so an upgrade that moves the internal fails loudly instead of silently changing
behaviour (uvicorn's protocol, asyncio's transport read size, Numba's ``cgutils``).
"""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

PYPROJECT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())


def _declared(name: str) -> str:
    for requirement in PYPROJECT["project"]["dependencies"]:
        if (
            re.match(rf"{re.escape(name)}\b", requirement)
            and not requirement[len(name) :][:1].isalnum()
        ):
            return requirement
    raise AssertionError(f"{name} is not a declared dependency")


def _installed_minor(name: str) -> str:
    return ".".join(metadata.version(name).split(".")[:2])


@pytest.mark.parametrize("name", ["uvicorn", "numba"])
def test_pinned_libraries_are_capped_at_the_installed_minor(name: str) -> None:
    """pyproject admits only the minor version these guards ran against."""
    major, minor = (int(x) for x in _installed_minor(name).split("."))
    assert f"<{major}.{minor + 1}" in _declared(name), (
        f"{name} is used through its internals: cap it at <{major}.{minor + 1} in pyproject.toml"
    )


def test_uvicorn_protocol_internals_the_bounded_reads_override() -> None:
    """ingest/http_protocol.py subclasses uvicorn's HttpToolsProtocol: it relies on
    ``on_body`` buffering into ``self.cycle.body`` and pausing ``self.flow``, and on
    ``on_response_complete`` existing; ingest/service.py overrides ``Server.capture_signals``."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    on_body = inspect.getsource(HttpToolsProtocol.on_body)
    assert "self.cycle.body += body" in on_body
    assert "self.flow.pause_reading()" in on_body
    assert callable(HttpToolsProtocol.on_response_complete)
    assert "capture_signals" in vars(uvicorn.Server)

    from tpmledger.ingest.http_protocol import bounded_read_protocol

    protocol = bounded_read_protocol()
    assert issubclass(protocol, HttpToolsProtocol)


def test_asyncio_selector_transports_read_max_size_bytes() -> None:
    """http_protocol.py sets ``transport.max_size`` (CPython's selector transport read size)."""
    from asyncio import selector_events

    transport = selector_events._SelectorSocketTransport
    assert transport.max_size == 256 * 1024
    assert "self.max_size" in inspect.getsource(transport._read_ready__data_received)
    assert asyncio.get_event_loop_policy() is not None


def test_numba_cgutils_raw_memcpy_is_there() -> None:
    """provenance/line_writer.py's memcpy intrinsic uses ``numba.core.cgutils.raw_memcpy``;
    without it the writer falls back to a loop 3 times slower. Under the pinned Numba the
    fast path must be the one taken."""
    from numba.core import cgutils

    from tpmledger.provenance import line_writer

    assert line_writer._memcpy_available()
    parameters = list(inspect.signature(cgutils.raw_memcpy).parameters)
    assert parameters[:5] == ["builder", "dst", "src", "count", "itemsize"], parameters


def test_value_sketch_reads_nothing_of_ddsketch() -> None:
    """The DDSketch mapping is owned (analytics/kernels/value_sketch.py); ddsketch is only
    the tests' reference, not a runtime dependency."""
    import tpmledger.analytics.kernels.value_sketch as value_sketch

    assert "import ddsketch" not in inspect.getsource(value_sketch)
    assert "from ddsketch" not in inspect.getsource(value_sketch)
    assert not any(r.startswith("ddsketch") for r in PYPROJECT["project"]["dependencies"])


def test_the_cli_walks_no_argparse_internals() -> None:
    import tpmledger.cli.main as cli_main

    source = inspect.getsource(cli_main)
    assert "._actions" not in source and "argparse._" not in source
