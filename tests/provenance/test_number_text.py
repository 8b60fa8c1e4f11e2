"""Known answers for the canonical number text, and the event file's fast path held to it."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import polars as pl
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.provenance.test_golden_digests import EVENTS_SHA256, golden_events
from tpmledger.provenance import event_values
from tpmledger.provenance.event_file import build_event_file
from tpmledger.provenance.number_text import number_text
from tpmledger.provenance.reference.jcs_text import number_text as reference_number_text

# ECMA-262 Number::toString and RFC 8785 Appendix B (IEEE 754 bits → text).
KNOWN = [
    (0.0, "0"),
    (-0.0, "0"),
    (1.0, "1"),
    (12.0, "12"),
    (-2.5, "-2.5"),
    (0.1, "0.1"),
    (0.1 + 0.2, "0.30000000000000004"),
    (0.000001, "0.000001"),
    (0.0000001, "1e-7"),
    (1e20, "100000000000000000000"),
    (1e21, "1e+21"),
    (123456789012345680000.0, "123456789012345680000"),
    (1.5e300, "1.5e+300"),
    (9007199254740992.0, "9007199254740992"),
    (4.35, "4.35"),
    (1 / 3, "0.3333333333333333"),
]
# RFC 8785 Appendix B: (hex of the IEEE 754 double, JCS text).
RFC8785_APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def _double(bits: str) -> float:
    return float(struct.unpack(">d", bytes.fromhex(bits))[0])


@pytest.mark.parametrize(("value", "text"), KNOWN)
def test_known_answers(value: float, text: str) -> None:
    assert number_text(value) == text


@pytest.mark.parametrize(("bits", "text"), RFC8785_APPENDIX_B)
def test_rfc8785_appendix_b(bits: str, text: str) -> None:
    assert number_text(_double(bits)) == text


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_have_no_text(value: float) -> None:
    with pytest.raises(ValueError, match="refused"):
        number_text(value)


finite = st.floats(allow_nan=False, allow_infinity=False)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(finite)
def test_agrees_with_the_rfc8785_package_and_the_reference_verifier(value: float) -> None:
    assert number_text(value) == rfc8785.dumps(value).decode() == reference_number_text(value)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(finite, st.none()), min_size=1, max_size=200))
def test_the_fast_path_prints_every_float_as_the_definition(values: list[float | None]) -> None:
    series = pl.Series("ttft_s", values, dtype=pl.Float64)
    (printed,) = event_values._float_texts(pl.DataFrame([series]), ["ttft_s"]).values()
    expected = ["null" if v is None else number_text(v) for v in values]
    assert printed.to_list() == expected


def test_this_polars_passes_the_golden_vectors() -> None:
    # If this fails after an upgrade, the writer already uses the definition itself (slower);
    # the digests stay the same either way.
    assert event_values.polars_prints_floats_canonically()


def test_without_the_fast_path_the_event_file_is_byte_identical(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_values, "polars_prints_floats_canonically", lambda: False)
    assert build_event_file(golden_events()).sha256 == EVENTS_SHA256


@pytest.mark.slow
def test_without_numbas_memcpy_helper_the_event_file_is_byte_identical(tmp_path: Path) -> None:
    # The writer's one Numba internal (cgutils.raw_memcpy) is optional: without it the
    # bytes come from a plain loop, and they are the same.
    import subprocess
    import sys

    code = (
        "import numba.core.cgutils as c; del c.raw_memcpy\n"
        "from tpmledger.provenance import line_writer as w\n"
        "from tests.provenance.test_golden_digests import golden_events\n"
        "from tpmledger.provenance.event_file import build_event_file\n"
        "assert not w._memcpy_available()\n"
        "print(build_event_file(golden_events()).sha256)\n"
    )
    env = {
        "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"),
        "PATH": "/usr/bin:/bin",
    }  # compiles afresh
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == EVENTS_SHA256
