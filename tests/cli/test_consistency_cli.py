"""``tpmledger summary verify-consistency`` never says OK for a forged statement.

Offline, no database: two genuine signed summaries (4 minutes, then 7) and the real proof
between them, then every forgery a probe tried plus a few more. Each is refused with one
line, exit 1 (or 2 for unusable input), and never a traceback.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tpmledger.cli.main import main
from tpmledger.provenance.consistency_document import (
    consistency_document,
    parse_document,
    proof_problem,
)
from tpmledger.provenance.dsse import sign_envelope
from tpmledger.provenance.in_toto_statement import (
    RUN_FIGURE_KEYS,
    build_predicate,
    build_statement,
    statement_payload,
)
from tpmledger.provenance.merkle import consistency_proof, leaf_hash, root_from_leaf_hashes
from tpmledger.provenance.signing_keys import public_key_pem

RUN = "grow"
LEAVES = [leaf_hash(b"minute %d" % i) for i in range(7)]


def _envelope(key: Ed25519PrivateKey, run_id: str, version: int, size: int) -> dict[str, Any]:
    figures = {k: None for k in RUN_FIGURE_KEYS} | {"run_id": run_id}
    predicate = build_predicate(
        figures,
        events_sha256="ab" * 32,
        events_count=size,
        merkle_root=root_from_leaf_hashes(LEAVES[:size]).hex(),
        tree_size=size,
        snapshot_version=version,
        seal="cd" * 32,
        computed_at="2026-02-01T04:00:00Z",
        generator={"name": "tpmledger", "version": "test"},
    )
    return sign_envelope(statement_payload(build_statement(predicate)), key)


class Case:
    """A directory with the proof file, both signed summaries and service.pub."""

    def __init__(self, root: Path) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.root = root
        self.pub = root / "service.pub"
        self.pub.write_text(public_key_pem(self.key.public_key()))
        self.document = consistency_document(
            RUN,
            {"version": 1, "tree_size": 4, "merkle_root": root_from_leaf_hashes(LEAVES[:4]).hex()},
            {"version": 2, "tree_size": 7, "merkle_root": root_from_leaf_hashes(LEAVES).hex()},
            consistency_proof(LEAVES, 4),
        )
        self.old = _envelope(self.key, RUN, 1, 4)
        self.new = _envelope(self.key, RUN, 2, 7)

    def write(self, name: str, value: Any) -> Path:
        path = self.root / name
        path.write_text(value if isinstance(value, str) else json.dumps(value))
        return path

    def args(self, *extra: str) -> list[str]:
        return [
            "summary",
            "verify-consistency",
            str(self.write("proof.json", self.document)),
            "--from-summary",
            str(self.write("v1.dsse.json", self.old)),
            "--to-summary",
            str(self.write("v2.dsse.json", self.new)),
            *extra,
        ]


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return Case(tmp_path)


def _run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    text = (captured.out + captured.err).strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    return code, text


def test_the_genuine_proof_with_both_signed_summaries_verifies(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _run(capsys, case.args())
    assert code == 0 and text.startswith("OK: version 2 of grow (7 minutes"), text
    code, text = _run(capsys, case.args("--key", str(case.pub)))
    assert code == 0, text


def _payload_edited(case: Case) -> None:
    statement = json.loads(base64.b64decode(case.new["payload"]))
    statement["predicate"]["minutes"]["tree_size"] = 8
    case.new["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    case.document["to"]["tree_size"] = 8


def _relabel_run(case: Case) -> None:
    case.document["run_id"] = "another-run"


def _relabel_versions(case: Case) -> None:
    case.document["from"]["version"], case.document["to"]["version"] = 5, 6


def _size_7_to_8(case: Case) -> None:
    case.document["to"]["tree_size"] = 8


def _swap_envelopes(case: Case) -> None:
    case.old, case.new = case.new, case.old


def _another_run_signed(case: Case) -> None:
    # Genuinely signed, but of another run with the same minute tree.
    case.old = _envelope(case.key, "other", 1, 4)
    case.new = _envelope(case.key, "other", 2, 7)


def _payload_type_changed(case: Case) -> None:
    case.new["payloadType"] = "application/json"


def _signature_dropped(case: Case) -> None:
    case.new["signatures"] = []


def _proof_node_edited(case: Case) -> None:
    case.document["proof"][0] = "00" * 32


def _root_edited_in_both(case: Case) -> None:
    case.document["to"]["merkle_root"] = "ab" * 32


def _set(side: str, field: str, value: Any) -> Callable[[Case], None]:
    def forge(case: Case) -> None:
        case.document[side][field] = value

    return forge


FORGERIES: dict[str, Callable[[Case], None]] = {
    "to-summary payload edited (signature no longer valid)": _payload_edited,
    "document relabelled to another run id": _relabel_run,
    "document relabelled to other versions": _relabel_versions,
    "to.tree_size 7 -> 8": _size_7_to_8,
    "from.tree_size 3.9": _set("from", "tree_size", 3.9),
    "from.tree_size 4.0": _set("from", "tree_size", 4.0),
    "tree_size as a string": _set("from", "tree_size", "4"),
    "bool as int (version true)": _set("from", "version", True),
    "bool as int (tree_size true)": _set("from", "tree_size", True),
    "huge int": _set("to", "tree_size", 10**30),
    "negative size": _set("from", "tree_size", -4),
    "zero size": _set("from", "tree_size", 0),
    "upper-case root": _set("from", "merkle_root", "AB" * 32),
    "swapped envelopes": _swap_envelopes,
    "summaries of another run": _another_run_signed,
    "payload type changed": _payload_type_changed,
    "no signatures": _signature_dropped,
    "proof node edited": _proof_node_edited,
    "to root edited": _root_edited_in_both,
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_every_forgery_is_refused_with_one_line(
    case: Case, capsys: pytest.CaptureFixture[str], forge: Callable[[Case], None]
) -> None:
    forge(case)
    code, text = _run(capsys, case.args())
    assert code == 1 and text.startswith("FAILED: "), text


def test_a_size_the_proof_cannot_tell_apart_needs_the_signed_statement(case: Case) -> None:
    """Why the signed summaries are required: 4 -> 7 and 4 -> 8 share the same proof."""
    _size_7_to_8(case)
    assert proof_problem(parse_document(case.document)) is None


def test_a_key_pinned_with_key_refuses_summaries_signed_by_another(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    other = Ed25519PrivateKey.generate()
    case.old, case.new = _envelope(other, RUN, 1, 4), _envelope(other, RUN, 2, 7)
    code, text = _run(capsys, case.args("--key", str(case.pub)))
    assert code == 1 and "signature does not verify" in text


MALFORMED = {
    "array": "[]",
    "string": '"proof"',
    "null": "null",
    "number": "7",
    "not JSON": "{",
    "deeply nested": "[" * 100_000,
    "digits beyond the parser's limit": '{"run_id": ' + "9" * 5000 + "}",
    "from is an array": json.dumps({"run_id": RUN, "from": [], "to": {}, "proof": []}),
}


@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_documents_are_refused_with_one_line(
    case: Case, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    args = case.args()
    case.write("proof.json", text)
    args[2] = str(case.root / "proof.json")
    code, out = _run(capsys, args)
    assert code in (1, 2), out


@pytest.mark.parametrize("text", ["[]", "null", '"x"', "[" * 100_000], ids=str.__len__)
def test_malformed_envelopes_are_refused_with_one_line(
    case: Case, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    args = case.args()
    case.write("v2.dsse.json", text)
    code, out = _run(capsys, args)
    assert code == 1 and "'to' summary" in out, out


def test_without_both_summaries_nothing_is_called_verified(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    proof = str(case.write("proof.json", case.document))
    code, text = _run(capsys, ["summary", "verify-consistency", proof])
    assert code == 2 and "--from-summary and --to-summary" in text
    only_to = ["summary", "verify-consistency", proof, "--to-summary"]
    code, text = _run(capsys, [*only_to, str(case.write("v2.dsse.json", case.new))])
    assert code == 2
    code, text = _run(capsys, ["summary", "verify-consistency", proof, "--unsigned"])
    assert code == 0 and text.startswith("UNSIGNED: ") and "OK" not in text


def test_an_export_directory_or_a_sigstore_bundle_stands_for_an_envelope(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpmledger.provenance.sigstore_bundle import bundle_from_envelope

    export = case.root / "v1"
    export.mkdir()
    (export / "summary.dsse.json").write_text(json.dumps(case.old))
    (export / "service.pub").write_text(case.pub.read_text())
    args = case.args()
    args[4] = str(export)
    args[6] = str(case.write("v2.sigstore.json", bundle_from_envelope(case.new, "hint")))
    code, text = _run(capsys, args)
    assert code == 0, text


@pytest.mark.parametrize("text", ["[]", '"x"', "7", "[" * 100_000], ids=str.__len__)
def test_summary_verify_refuses_a_non_object_proof_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    proof = tmp_path / "proof.json"
    proof.write_text(text)
    assert main(["summary", "verify", str(proof)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.out.startswith("FAIL  proof file: ")


def test_a_minute_proof_index_must_be_an_integer() -> None:
    from tpmledger.provenance.minute_proofs import build_minute_proofs, check_minute_proof

    leaves = [
        {"minute_utc": f"2026-02-01T03:4{i}:00Z", "calls_in_minute": i, "prompt_tpm_in": 0,
         "completion_tpm_out": 0, "tpm_total": 0, "failures": 0, "retries": 0,
         "events_sha256": "ab" * 32}
        for i in range(5)
    ]  # fmt: skip
    proofs = build_minute_proofs(RUN, leaves)
    entry = proofs["minutes"][3]
    assert check_minute_proof(entry, proofs["merkle_root"], 5) is None
    for index in (3.0, 3.9, "3", True):
        problem = check_minute_proof({**entry, "index": index}, proofs["merkle_root"], 5)
        assert problem is not None and "not an integer" in problem
    huge = {**entry, "leaf": {**entry["leaf"], "tpm_total": 2**80}}
    assert "cannot be canonicalized" in str(check_minute_proof(huge, proofs["merkle_root"], 5))
