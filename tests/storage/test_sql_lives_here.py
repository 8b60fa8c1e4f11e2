"""SQL lives in tpmledger.storage (and the migrations) alone: no other layer writes a query."""

from __future__ import annotations

import re

from tests.package_tree import source_files

# A query written outside storage: SQL text, an execute or a cursor.
QUERY = re.compile(r"\bsqlalchemy\b.*\btext\b|\bsa\.text\(|\.execute\(|\.cursor\(")


def test_no_module_outside_storage_writes_sql() -> None:
    offenders = sorted(
        f"{module}:{number}"
        for module, path in source_files()
        if module.split(".")[1:2] not in (["storage"], ["migrations"])
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if QUERY.search(line)
    )
    assert offenders == []
