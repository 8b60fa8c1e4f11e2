"""Known-answer vectors for signed notes and cosignatures.

The vectors are copied from the texts that define the formats, not produced by this code:
Go's golang.org/x/mod/sumdb/note tests (PeterNeumann / EnochRoot keys, the signed note
of TestSign) and the C2SP tlog-cosignature / tlog-checkpoint examples.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tpmledger.provenance.checkpoint import Checkpoint, parse_checkpoint_text, run_origin
from tpmledger.provenance.cosignature import (
    WitnessKey,
    cosign,
    cosignature_message,
    cosignature_time,
    parse_witness_key,
    verify_cosignature,
)
from tpmledger.provenance.signed_note import (
    ED25519,
    NoteError,
    ed25519_signature,
    key_id,
    parse_note,
    parse_verifier_key,
    sign_note,
    verify_ed25519,
)

# golang.org/x/mod/sumdb/note note_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqd"
    "ngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWL"
    "ox33WWd1RvMc+QQ=\n"
)

# c2sp.org/tlog-cosignature: the example checkpoint and its witness line.
SOFA_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SOFA_WITNESS_LINE = (
    "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJs"
    "X3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"
)
SOFA_LOG_LINE = (
    "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhc"
    "yv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
)


def _peter_private() -> Ed25519PrivateKey:
    seed = base64.b64decode(PETER_SKEY.split("+", 4)[4])
    assert seed[0] == ED25519
    return Ed25519PrivateKey.from_private_bytes(seed[1:])


def test_key_id_is_sha256_of_name_newline_type_and_key() -> None:
    key = parse_verifier_key(PETER_VKEY)
    material = base64.b64decode(PETER_VKEY.split("+")[2])
    expected = hashlib.sha256(b"PeterNeumann\n" + material).digest()[:4]
    assert expected.hex() == "c74f20a3"
    assert key.key_id == expected == key_id("PeterNeumann", 0x01, material[1:])
    assert key.text == PETER_VKEY
    assert parse_verifier_key(ENOCH_VKEY).key_id.hex() == "af0cfe78"


def test_go_signed_note_is_reproduced_byte_for_byte() -> None:
    assert sign_note(GO_TEXT, "PeterNeumann", _peter_private()) == GO_TEXT + "\n" + PETER_SIG
    assert ed25519_signature(GO_TEXT, "PeterNeumann", _peter_private()).line == PETER_SIG


def test_go_note_with_two_signatures_verifies_with_each_key() -> None:
    note = parse_note(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG)
    assert note.text == GO_TEXT and len(note.signatures) == 2
    verify_ed25519(note, parse_verifier_key(PETER_VKEY))
    verify_ed25519(note, parse_verifier_key(ENOCH_VKEY))
    tampered = parse_note(GO_TEXT.replace("answer", "Answer") + "\n" + PETER_SIG)
    with pytest.raises(NoteError, match="invalid signature for key PeterNeumann"):
        verify_ed25519(tampered, parse_verifier_key(PETER_VKEY))


@pytest.mark.parametrize(
    "bad",
    [
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # wrong key id
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown type
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3",
    ],
)
def test_mangled_verifier_keys_are_refused(bad: str) -> None:
    with pytest.raises(NoteError):
        parse_verifier_key(bad)


@pytest.mark.parametrize(
    "message",
    [
        GO_TEXT,
        GO_TEXT + "\n",
        GO_TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + GO_TEXT + "\n" + PETER_SIG,
        GO_TEXT + "\n" + "— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2"
        "pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
        GO_TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ],
)
def test_malformed_notes_are_refused(message: str) -> None:
    # The same malformed messages Go's TestOpen refuses.
    with pytest.raises(NoteError):
        parse_note(message)


def test_cosignature_line_of_the_c2sp_example_carries_its_key_id_and_time() -> None:
    note = parse_note(SOFA_BODY + "\n" + SOFA_LOG_LINE + SOFA_WITNESS_LINE)
    assert parse_checkpoint_text(note.text) == Checkpoint(
        "example.com/behind-the-sofa",
        20852163,
        base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I="),
    )
    witness = note.signatures[1]
    assert witness.name == "witness.example.com/w1"
    # The spec's signed-message example says "time 1679315147" for this line.
    assert cosignature_time(witness) == 1679315147
    assert len(witness.key_id + witness.signature) == 4 + 8 + 64


def test_cosignature_signed_message_is_exactly_the_c2sp_bytes() -> None:
    expected = (
        b"cosignature/v1\n"
        b"time 1679315147\n"
        b"example.com/behind-the-sofa\n"
        b"20852163\n"
        b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    )
    assert cosignature_message(1679315147, SOFA_BODY) == expected


def test_cosignature_bytes_key_id_and_verification() -> None:
    # A fixed seed (RFC 8032 test 1): Ed25519 is deterministic, so the line is fixed too.
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    witness = WitnessKey("witness.example.com/w1", Ed25519PrivateKey.from_private_bytes(seed))
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert witness.verifier.public_key == public
    expected_id = hashlib.sha256(b"witness.example.com/w1\n\x04" + public).digest()[:4]
    assert witness.verifier.key_id == expected_id
    assert witness.verifier.text == (
        f"witness.example.com/w1+{expected_id.hex()}+" + base64.b64encode(b"\x04" + public).decode()
    )
    assert witness.private_text == (
        f"PRIVATE+KEY+witness.example.com/w1+{expected_id.hex()}+"
        + base64.b64encode(b"\x04" + seed).decode()
    )
    assert parse_witness_key(witness.private_text).verifier == witness.verifier
    line = cosign(SOFA_BODY, witness, 1679315147)
    raw = line.key_id + line.signature
    assert raw[:4] == expected_id and raw[4:12] == (1679315147).to_bytes(8, "big")
    witness.verifier.ed25519.verify(raw[12:], cosignature_message(1679315147, SOFA_BODY))
    note = parse_note(SOFA_BODY + "\n" + SOFA_LOG_LINE + line.line)
    assert verify_cosignature(note, witness.verifier) == 1679315147
    forged = parse_note(SOFA_BODY.replace("20852163", "20852164") + "\n" + line.line)
    with pytest.raises(NoteError, match="does not verify"):
        verify_cosignature(forged, witness.verifier)


def test_run_origin_percent_encodes_the_run_id() -> None:
    assert run_origin("ledger.example", "fleet a+b/c") == (
        "ledger.example/tpmledger/runs/fleet%20a%2Bb%2Fc"
    )
    with pytest.raises(NoteError):
        run_origin("bad host", "r")


def test_the_docs_example_checkpoint_verifies_with_its_verifier_key() -> None:
    from pathlib import Path

    from tests.provenance import independent_checkpoint as independent
    from tpmledger.provenance.checkpoint import open_checkpoint

    docs = (Path(__file__).parents[2] / "docs" / "provenance.md").read_text()
    start = docs.index("```\nledger.example.com/tpmledger/runs/fleet-0412\n") + 4
    note = docs[start : docs.index("```", start)]
    vkey = docs.split("(its verifier key: `", 1)[1].split("`", 1)[0]
    checkpoint, _ = open_checkpoint(note, parse_verifier_key(vkey))
    assert checkpoint.tree_size == 27
    assert independent.read_checkpoint(note, vkey)[:2] == (checkpoint.origin, 27)
