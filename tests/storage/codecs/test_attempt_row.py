"""The attempt row is built by column name and comes out in COPY order."""

from __future__ import annotations

import pytest

from tests.ingest.span_builders import LLM, as_columns, normalize, span
from tpmledger.ingest.quota_headers import NO_QUOTA, QUOTA_COLUMNS
from tpmledger.storage.codecs.attempt_row import (
    MAX_PART_COLUMNS,
    attempt_row,
    description_part,
    identity_part,
    measures_part,
    quota_part,
    quota_part_from,
)
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COPY_COLUMNS, ATTEMPT_ROW_PARTS

_BUILDERS = {
    "identity": identity_part,
    "measures": measures_part,
    "description": description_part,
    "quota": quota_part,
}


def _names(part: str) -> list[str]:
    return [column.name for column in ATTEMPT_ROW_PARTS[part]]


def _row_of_names(**override: dict[str, str]) -> tuple[object, ...]:
    # Each column's value is its own name, so the order of the result can be read off.
    parts = {
        part: _BUILDERS[part](**override.get(part, {name: name for name in _names(part)}))
        for part in ATTEMPT_ROW_PARTS
    }
    return attempt_row(**parts)


def test_values_given_by_name_come_out_in_copy_order() -> None:
    assert _row_of_names() == ATTEMPT_COPY_COLUMNS


def test_every_part_has_a_builder_and_fits_in_a_fast_keyword_call() -> None:
    assert set(_BUILDERS) == set(ATTEMPT_ROW_PARTS)
    for part in ATTEMPT_ROW_PARTS:
        assert 0 < len(_names(part)) <= MAX_PART_COLUMNS, part


@pytest.mark.parametrize("part", list(ATTEMPT_ROW_PARTS))
def test_a_missing_column_fails_loudly(part: str) -> None:
    values = {name: name for name in _names(part)}
    missing = _names(part)[-1]
    del values[missing]
    with pytest.raises(TypeError, match=missing):
        _row_of_names(**{part: values})


@pytest.mark.parametrize("part", list(ATTEMPT_ROW_PARTS))
def test_a_misnamed_column_fails_loudly(part: str) -> None:
    values = {name: name for name in _names(part)}
    first = _names(part)[0]
    values[first + "s"] = values.pop(first)
    with pytest.raises(TypeError, match=first + "s"):
        _row_of_names(**{part: values})


def test_a_missing_part_fails_loudly() -> None:
    with pytest.raises(TypeError, match="quota"):
        attempt_row(
            identity=identity_part(**{n: n for n in _names("identity")}),
            measures=measures_part(**{n: n for n in _names("measures")}),
            description=description_part(**{n: n for n in _names("description")}),
        )


def test_a_part_read_from_a_mapping_names_a_missing_column() -> None:
    values = {name: name for name in _names("quota")}
    assert quota_part_from(values) == tuple(_names("quota"))
    del values["retry_after_s"]
    with pytest.raises(KeyError, match="retry_after_s"):
        quota_part_from(values)


def test_values_cannot_be_passed_by_position() -> None:
    with pytest.raises(TypeError):
        quota_part(*range(len(_names("quota"))))


def test_the_quota_reader_fills_the_quota_part() -> None:
    assert tuple(QUOTA_COLUMNS) == tuple(_names("quota"))
    assert dict(zip(_names("quota"), NO_QUOTA, strict=True)) == {
        **dict.fromkeys(QUOTA_COLUMNS),
        "quota_values_ignored": 0,
    }


def test_a_normalized_span_lands_in_its_named_columns() -> None:
    attributes = {
        **LLM,
        "gen_ai.request.model": "m-1",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
        "tpmledger.quota.tpm": 90000,
    }
    one = span(attributes, name="chat m-1")
    (row,) = normalize(one, resource={"tpmledger.run.id": "r1", "tpmledger.shard.id": "s1"}).rows
    got = as_columns(row)
    assert (got["trace_id"], got["span_id"]) == (one.trace_id, one.span_id)
    assert (got["run_id"], got["shard_id"], got["model"]) == ("r1", "s1", "m-1")
    assert (got["prompt_tokens"], got["completion_tokens"]) == (11, 7)
    assert (got["start_ns"], got["end_ns"]) == (one.start_time_unix_nano, one.end_time_unix_nano)
    assert (got["span_name"], got["status"]) == ("chat m-1", "ok")
    assert got["quota_tpm_declared"] == 90000.0
