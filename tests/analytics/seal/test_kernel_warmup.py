"""The kernel warm-up compiles the variants the product calls (issue 37: the live path's
first read compiled the parser in the worker, on a run's first figures' path)."""

from __future__ import annotations

import io

from tpmledger.analytics.seal.kernel_warmup import warm
from tpmledger.storage.codecs import binary_copy


def test_the_warm_up_compiles_the_parser_for_the_buffers_reads_hand_it() -> None:
    warm()
    compiled = {args[0].mutable for args in binary_copy._scan.signatures}
    # A read's buffer (attempt_frames._copy_out) is a BytesIO's: writable.
    buffer = binary_copy.np.frombuffer(io.BytesIO(b"x").getbuffer(), dtype="uint8")
    assert buffer.flags.writeable
    assert compiled == {True, False}
