"""Remember which deploy tests failed, so the compose stack fixture keeps its logs then."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

FAILED = pytest.StashKey[list[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:  # type: ignore[attr-defined]
        item.session.stash.setdefault(FAILED, []).append(item.nodeid)
    return report
