"""Minute proofs: every leaf proves against the root; any changed byte does not."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tpmledger.provenance.minute_proofs import (
    ProofError,
    build_minute_proofs,
    check_minute_proof,
    minute_tree_root,
    single_proof,
)


def leaves(n: int) -> list[dict[str, Any]]:
    return [
        {
            "minute_utc": f"2026-02-01T03:{i:02d}:00Z",
            "calls_in_minute": i,
            "prompt_tpm_in": 100 * i,
            "completion_tpm_out": 50 * i,
            "tpm_total": 150 * i,
            "failures": 0,
            "retries": None,
            "events_sha256": f"{i:064x}",
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 13])
def test_every_minute_proves_against_the_root(n: int) -> None:
    doc = build_minute_proofs("run-a", leaves(n))
    assert (doc["merkle_root"], doc["tree_size"]) == minute_tree_root(leaves(n))
    for entry in doc["minutes"]:
        assert check_minute_proof(entry, doc["merkle_root"], n) is None


def test_changed_figure_path_or_root_is_named() -> None:
    doc = build_minute_proofs("run-a", leaves(7))
    entry = copy.deepcopy(doc["minutes"][3])
    entry["leaf"]["tpm_total"] += 1
    entry.pop("leaf_hash")
    assert "does not lead to the signed Merkle root" in str(
        check_minute_proof(entry, doc["merkle_root"], 7)
    )
    entry = copy.deepcopy(doc["minutes"][3])
    entry["proof"][0] = ("0" if entry["proof"][0][0] != "0" else "1") + entry["proof"][0][1:]
    assert "03:03:00Z" in str(check_minute_proof(entry, doc["merkle_root"], 7))
    other_root = minute_tree_root(leaves(8))[0]
    assert check_minute_proof(doc["minutes"][3], other_root, 7) is not None
    entry = copy.deepcopy(doc["minutes"][3])
    entry["leaf"]["extra"] = 1
    assert "minute-leaf fields" in str(check_minute_proof(entry, doc["merkle_root"], 7))


def test_single_proof_accepts_either_utc_spelling() -> None:
    doc = build_minute_proofs("run-a", leaves(5))
    proof = single_proof(doc, "2026-02-01T03:02:00+00:00", {"payload": "x"})
    assert proof["leaf"]["minute_utc"] == "2026-02-01T03:02:00Z"
    assert proof["envelope"] == {"payload": "x"}
    assert check_minute_proof(proof, doc["merkle_root"], 5) is None
    with pytest.raises(ProofError, match="minutes run from 2026-02-01T03:00:00Z"):
        single_proof(doc, "2026-02-01T04:00:00Z", {})
    with pytest.raises(ProofError, match="RFC 3339"):
        single_proof(doc, "yesterday", {})
