"""The command line's shared options: -v anywhere, quiet logging by default."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from tpmledger.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [["-v", "runs"], ["runs", "-v"], ["summary", "verify", "DIR", "--verbose"], ["up", "-v"]],
)
def test_verbose_is_accepted_before_or_after_the_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).verbose is True


def test_without_verbose_it_is_false_wherever_the_command_is() -> None:
    assert build_parser().parse_args(["summary", "verify", "DIR"]).verbose is False


_PROBE = """
import logging, sys
from tpmledger.cli.main import configure_logging
configure_logging(sys.argv[1], sys.argv[2] == "1")
print(logging.getLogger().level, logging.getLogger("alembic").getEffectiveLevel())
"""


@pytest.mark.parametrize(
    ("command", "verbose", "root", "alembic"),
    [
        ("runs", "0", logging.WARNING, logging.WARNING),
        ("up", "0", logging.INFO, logging.WARNING),
        ("up", "1", logging.DEBUG, logging.DEBUG),
    ],
)
def test_logging_is_quiet_unless_verbose(
    command: str, verbose: str, root: int, alembic: int
) -> None:
    # A new process: logging.basicConfig configures a process once.
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, command, verbose], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [str(root), str(alembic)]


def test_help_imports_nothing_heavy() -> None:
    """`tpmledger --help` took 4 s on a loaded machine (issue 37): building the parser must
    not import the settings, the database, the analytics, the simulator or the key code."""
    import subprocess
    import sys

    heavy = ("pydantic", "sqlalchemy", "polars", "numba", "cryptography", "importlib.metadata",
             "tpmledger.simulator.fleet", "tpmledger.settings", "urllib.request")  # fmt: skip
    probe = (
        "import sys; from tpmledger.cli.main import build_parser; build_parser(); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout
