"""A second, independent reader of tpmledger's C2SP log: checkpoints, cosignatures, tiles.

Written from the C2SP texts (signed-note, tlog-checkpoint, tlog-cosignature, tlog-tiles)
and RFC 6962 with the standard library and ``cryptography`` only. It imports nothing of
tpmledger, so a checkpoint it accepts was not judged by the code that made it.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

DASH = "\u2014 "


class Rejected(Exception):
    pass


def _vkey(text: str, kind: int) -> tuple[str, bytes, bytes]:
    name, key_hash, b64 = text.strip().split("+", 2)
    blob = base64.b64decode(b64)
    if blob[0] != kind or len(blob) != 33:
        raise Rejected(f"key type {blob[0]} is not {kind}")
    digest = hashlib.sha256(name.encode() + b"\n" + blob).digest()
    if digest[:4].hex() != key_hash:
        raise Rejected("key hash does not match")
    return name, digest[:4], blob[1:]


def _split(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    body, sep, sigs = note.rpartition("\n\n")
    if not sep:
        raise Rejected("no blank line")
    lines = []
    for line in sigs.rstrip("\n").split("\n"):
        if not line.startswith(DASH):
            raise Rejected(f"bad line {line!r}")
        name, b64 = line[len(DASH) :].split(" ")
        lines.append((name, base64.b64decode(b64)))
    return body + "\n", lines


def read_checkpoint(note: str, log_vkey: str) -> tuple[str, int, bytes]:
    """(origin, size, root) of a checkpoint that the log key signed."""
    name, key_hash, public = _vkey(log_vkey, 0x01)
    body, sigs = _split(note)
    mine = [raw for signer, raw in sigs if signer == name and raw[:4] == key_hash]
    if not mine:
        raise Rejected("no signature by the log key")
    for raw in mine:
        Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], body.encode())
    origin, size, root, *rest = body.split("\n")
    if rest != [""] or origin != name:
        raise Rejected("not a three-line checkpoint of this origin")
    return origin, int(size), base64.b64decode(root)


def cosigned_at(note: str, witness_vkey: str) -> int:
    """The time of the witness's verified cosignature/v1 on the note."""
    name, key_hash, public = _vkey(witness_vkey, 0x04)
    body, sigs = _split(note)
    for signer, raw in sigs:
        if signer == name and raw[:4] == key_hash:
            (when,) = struct.unpack(">Q", raw[4:12])
            message = b"cosignature/v1\ntime %d\n" % when + body.encode()
            Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message)
            return int(when)
    raise Rejected("no cosignature by the witness")


def mth(hashes: list[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash over leaf hashes, recursively."""
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(hashes[:k]) + mth(hashes[k:])).digest()


def _index(n: int) -> str:
    groups = [f"{n % 1000:03d}"]
    while n >= 1000:
        n //= 1000
        groups.insert(0, f"x{n % 1000:03d}")
    return "/".join(groups)


def entries_from_tiles(read: object, size: int) -> list[bytes]:
    """Every entry of a tree of ``size`` leaves from its entry bundles."""
    fetch = read if callable(read) else (lambda p: (Path(str(read)) / p).read_bytes())
    out: list[bytes] = []
    for n in range((size + 255) // 256):
        width = min(256, size - n * 256)
        path = f"tile/entries/{_index(n)}" + (f".p/{width}" if width < 256 else "")
        data, at = fetch(path), 0
        while at < len(data):
            (length,) = struct.unpack(">H", data[at : at + 2])
            out.append(data[at + 2 : at + 2 + length])
            at += 2 + length
    if len(out) != size:
        raise Rejected(f"{len(out)} entries for a tree of {size}")
    return out


def root_of_entries(entries: list[bytes]) -> bytes:
    if not entries:
        return hashlib.sha256(b"").digest()
    return mth([hashlib.sha256(b"\x00" + e).digest() for e in entries])
