"""Logical calls (docs/conventions.md, docs/metrics.md): the attempts that share a ``call_id`` are
one call.

Only calls with several attempts need ordering; they are found by repeated 64-bit hashes
of the call id (one sort), so the million single-attempt calls of a typical run are only
counted. (The seal orders a run's calls before its walk, :mod:`analytics.seal.run_chunks`.)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tpmledger.analytics.kernels.group_kernels import in_set


def repeated(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """Which entries occur more than once (one sort; membership in the few repeats)."""
    ordered = np.sort(values)
    repeats = ordered[1:][ordered[1:] == ordered[:-1]]
    # A compiled probe of a small set; NumPy's searchsorted of unsorted needles was
    # 15x slower, Polars' is_in 2x.
    return in_set(values, repeats)
