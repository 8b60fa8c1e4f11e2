"""shard_codes_among: the hash lookup codes rows exactly as the Enum cast does."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tpmledger.analytics.kernels.event_grid import shard_codes_among


def _cast(shard_id: pl.Series, shard_ids: tuple[str, ...]) -> list[int]:
    return shard_id.cast(pl.Enum(shard_ids)).to_physical().cast(pl.Int64).to_list()


@pytest.mark.parametrize("shards", [1, 3, 40, 200])  # 200: more ids than the lookup takes
def test_codes_equal_the_enum_cast(shards: int) -> None:
    rng = np.random.default_rng(shards)
    shard_ids = tuple(sorted({f"shard-{i}" * (1 + i % 4) for i in range(shards)}))
    rows = pl.Series([shard_ids[i] for i in rng.integers(0, len(shard_ids), 10_000)])
    assert shard_codes_among(rows, shard_ids).tolist() == _cast(rows, shard_ids)
    wider = (*shard_ids, "zz-unused")  # ids without rows keep their places
    assert shard_codes_among(rows, wider).tolist() == _cast(rows, wider)


def test_an_unknown_id_is_refused_like_the_cast() -> None:
    with pytest.raises(pl.exceptions.InvalidOperationError):
        shard_codes_among(pl.Series(["a", "b", "x"]), ("a", "b"))


def test_no_rows() -> None:
    assert shard_codes_among(pl.Series([], dtype=pl.String), ("a",)).size == 0
