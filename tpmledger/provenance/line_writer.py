"""Compiled assembly of the canonical event file's bytes (Numba).

Every line is the same sequence: literal key text, a value, literal key text, a value,
…, ``}\\n``. Values are of two kinds, prepared column at a time by
:mod:`provenance.event_values`:

- *text*: bytes already in their final form (string contents, or float and escaped
  string text), optionally put between quotes; a null row prints ``null``;
- *integers*: printed here in decimal, optionally between quotes (nanosecond times are
  decimal strings in the file); a null row prints ``null``.

One pass measures every line, a running sum places them, and the bytes are written in
canonical row order straight into one buffer, so no per-line object exists. The write
pass is split in two halves run by two threads (the kernels release the GIL); the
bytes do not depend on the split.

The loops are plain functions here and are compiled on first use (:func:`_compiled`), so
importing this module (and :mod:`provenance` as a whole) needs no Numba: the offline
verifier never writes an event file and runs where Numba is not installed.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]

TEXT, INTEGER = 0, 1
_QUOTE = ord('"')


def _memcpy_intrinsic(
    typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, size: Any
) -> Any:
    """``dst[dst_at:dst_at + size] = src[src_at:src_at + size]`` as one LLVM memcpy.

    The lines are made of ~30 short pieces; a byte loop per piece cost about three
    times as much, and slice assignment makes array views.
    """
    from numba import types
    from numba.core import cgutils

    signature = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        target, target_at, source, source_at, count = args
        target_array = context.make_array(sig.args[0])(context, builder, target)
        source_array = context.make_array(sig.args[2])(context, builder, source)
        cgutils.raw_memcpy(
            builder,
            builder.gep(target_array.data, [target_at]),
            builder.gep(source_array.data, [source_at]),
            count,
            1,
        )
        return context.get_dummy_value()

    return signature, codegen


def _copy_bytes(dst: Bytes, dst_at: int, src: Bytes, src_at: int, size: int) -> None:
    """The same copy as a plain loop: used when Numba's code-generation helpers are not
    there (they are Numba internals); about 3 times slower, byte for byte the same."""
    for i in range(size):
        dst[dst_at + i] = src[src_at + i]


def _memcpy_available() -> bool:
    """Whether this Numba offers the internal ``cgutils.raw_memcpy`` the intrinsic uses."""
    try:
        from numba.core import cgutils
    except ImportError:
        return False
    return callable(getattr(cgutils, "raw_memcpy", None))


_memcpy: Any = None  # the intrinsic (or the loop), chosen by _compiled()


def _digits(value: int) -> int:
    """Characters of ``value`` in decimal, sign included."""
    if value == 0:
        return 1
    count = 1 if value < 0 else 0
    magnitude = np.uint64(-(value + 1)) + np.uint64(1) if value < 0 else np.uint64(value)
    while magnitude > 0:
        magnitude //= np.uint64(10)
        count += 1
    return count


def _write_int(out: Bytes, position: int, value: int, size: int) -> None:
    """Write ``value`` in decimal into ``out[position:position + size]``."""
    if value < 0:
        out[position] = ord("-")
        magnitude = np.uint64(-(value + 1)) + np.uint64(1)
    else:
        magnitude = np.uint64(value)
    end = position + size - 1
    while True:
        out[end] = np.uint8(ord("0") + magnitude % np.uint64(10))
        magnitude //= np.uint64(10)
        end -= 1
        if magnitude == 0:
            break


def line_sizes(
    sizes: Ints,
    first: int,
    last: int,
    order: Ints,
    literal_sizes: Ints,
    kinds: npt.NDArray[np.int8],
    slots: Ints,
    quoted: Bools,
    text_offsets: Ints,
    text_valid: Bools,
    int_values: Ints,
    int_valid: Bools,
) -> None:
    """The byte size of lines ``first`` to ``last`` (exclusive), into ``sizes``."""
    fixed = literal_sizes.sum()
    for line in range(first, last):
        row = order[line]
        size = fixed
        for field in range(kinds.size):
            slot = slots[field]
            if kinds[field] == TEXT:
                present = text_valid[slot, row]
                if present:
                    size += text_offsets[slot, row + 1] - text_offsets[slot, row]
            else:
                present = int_valid[slot, row]
                if present:
                    size += _digits(int_values[slot, row])
            if not present:
                size += 4
            elif quoted[field]:
                size += 2
        sizes[line] = size


def write_lines(
    out: Bytes,
    offsets: Ints,
    first: int,
    last: int,
    order: Ints,
    literal: Bytes,
    literal_starts: Ints,
    kinds: npt.NDArray[np.int8],
    slots: Ints,
    quoted: Bools,
    text_offsets: Ints,
    text_data: Bytes,
    text_valid: Bools,
    int_values: Ints,
    int_valid: Bools,
) -> None:
    """Write lines ``first`` to ``last`` (exclusive) at their offsets."""
    fields = kinds.size
    for line in range(first, last):
        row = order[line]
        position = offsets[line]
        for field in range(fields + 1):
            lo, hi = literal_starts[field], literal_starts[field + 1]
            _memcpy(out, position, literal, lo, hi - lo)
            position += hi - lo
            if field == fields:
                break
            slot = slots[field]
            text = kinds[field] == TEXT
            present = text_valid[slot, row] if text else int_valid[slot, row]
            if not present:
                out[position] = ord("n")
                out[position + 1] = ord("u")
                out[position + 2] = ord("l")
                out[position + 3] = ord("l")
                position += 4
                continue
            if quoted[field]:
                out[position] = _QUOTE
                position += 1
            if text:
                lo, hi = text_offsets[slot, row], text_offsets[slot, row + 1]
                _memcpy(out, position, text_data, lo, hi - lo)
                position += hi - lo
            else:
                value = int_values[slot, row]
                size = _digits(value)
                _write_int(out, position, value, size)
                position += size
            if quoted[field]:
                out[position] = _QUOTE
                position += 1


_compile_lock = threading.Lock()


@functools.cache
def _compiled() -> tuple[Any, Any]:
    """The compiled ``line_sizes`` and ``write_lines`` (Numba imported here, on first use).

    Compiled loops find the helpers they call among this module's globals, so the
    helpers' names are rebound to their compiled versions first; the loops themselves
    stay module-level functions, which keeps Numba's on-disk cache valid across processes.
    """
    import numba
    from numba.extending import intrinsic

    kernel = numba.njit(nogil=True, cache=True)
    module = globals()
    with _compile_lock:  # functools.cache alone may run this twice in two threads
        if _memcpy is None:
            fast = _memcpy_available()
            module["_memcpy"] = intrinsic(_memcpy_intrinsic) if fast else kernel(_copy_bytes)
            for name in ("_digits", "_write_int"):
                module[name] = kernel(module[name])
    return kernel(line_sizes), kernel(write_lines)


@dataclass(frozen=True)
class LineLayout:
    """The line template and the value columns, as the kernels take them.

    ``literal[literal_starts[i]:literal_starts[i + 1]]`` precedes field ``i`` (the last
    segment ends the line); field ``i`` is ``kinds[i]`` (:data:`TEXT` or
    :data:`INTEGER`) column ``slots[i]`` of the matching arrays.
    """

    literal: Bytes
    literal_starts: Ints
    kinds: npt.NDArray[np.int8]
    slots: Ints
    quoted: Bools
    text_offsets: Ints  # (text columns, rows + 1): positions in text_data
    text_data: Bytes
    text_valid: Bools  # (text columns, rows)
    int_values: Ints  # (integer columns, rows)
    int_valid: Bools  # (integer columns, rows)


def _halves(function: Any, before: tuple[Any, ...], after: tuple[Any, ...], size: int) -> None:
    """``function(*before, first, last, *after)`` on both halves of ``range(size)`` at
    once (a thread each; the kernels release the GIL)."""
    middle = size // 2
    with ThreadPoolExecutor(max_workers=1) as pool:
        later = pool.submit(lambda: function(*before, middle, size, *after))
        function(*before, 0, middle, *after)
        later.result()


def write_file(layout: LineLayout, order: Ints) -> tuple[Bytes, Ints]:
    """The file's bytes (lines in ``order`` of rows) and where each line starts."""
    measure, write = _compiled()
    sizes = np.empty(order.size, dtype=np.int64)
    measured = (
        order,
        np.diff(layout.literal_starts),
        layout.kinds,
        layout.slots,
        layout.quoted,
        layout.text_offsets,
        layout.text_valid,
        layout.int_values,
        layout.int_valid,
    )
    _halves(measure, (sizes,), measured, order.size)
    offsets = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    columns = (
        layout.literal,
        layout.literal_starts,
        layout.kinds,
        layout.slots,
        layout.quoted,
        layout.text_offsets,
        layout.text_data,
        layout.text_valid,
        layout.int_values,
        layout.int_valid,
    )
    _halves(write, (out, offsets), (order, *columns), order.size)
    return out, offsets
