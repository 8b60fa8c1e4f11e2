"""The compile notice is printed when Numba compiles a kernel, once, and never because
warming was slow (tests/cli/test_compile_notice.py runs the command twice on one cache)."""

from __future__ import annotations

import time

import numba
import pytest

from tpmledger.analytics.seal import compile_notice
from tpmledger.analytics.seal.compile_notice import NOTICE, ensure_kernels


def test_a_compilation_is_announced_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def compiles() -> float:
        # Functions made here are in no cache: Numba compiles both.
        numba.njit(lambda x: x + 1)(1)
        numba.njit(lambda x: x * 2)(1.5)
        return 0.0

    monkeypatch.setattr(compile_notice, "warm", compiles)
    ensure_kernels()
    assert capsys.readouterr().err == NOTICE + "\n"


@pytest.mark.slow
def test_slow_warming_without_a_compilation_says_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    add = numba.njit(lambda x: x + 1)
    add(1)  # compiled before the warm-up

    def loads_slowly() -> float:
        time.sleep(1.5)  # a loaded machine reading the cache (the notice once came at 1 s)
        add(2)
        return 1.5

    monkeypatch.setattr(compile_notice, "warm", loads_slowly)
    ensure_kernels()
    assert capsys.readouterr().err == ""


def test_kernels_already_loaded_say_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    ensure_kernels()  # compiles or loads them, whatever this process did before
    capsys.readouterr()
    ensure_kernels()
    assert capsys.readouterr().err == ""
