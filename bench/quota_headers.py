"""What reading the provider's rate-limit state costs ingest (docs/metrics.md#quota-headroom).

Normalizes one export request of 512 simulator-like spans (``bench/normalize.py``'s), three
ways, in the same process and the same run, interleaved so machine load hits all alike:

- *baseline*: the rate-limit reader replaced by a constant (what ingest did before it read
  quotas: only the row's extra columns remain);
- *no rate-limit keys*: the real reader on spans that carry none (most fleets);
- *headers on every span* (against the same payload with the reader replaced): every span
  carries five captured ``x-ratelimit-*`` /
  ``retry-after`` headers as string arrays (a fleet whose HTTP instrumentation captures them).

Prints spans/s of CPU time (``normalize_payload`` from the protobuf bytes, as the servers
call it) and each ratio against the baseline.

Run: ``.venv/bin/python bench/quota_headers.py [--seconds 3] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
sys.path.insert(0, str(_ROOT))
sys.path.insert(1, str(_ROOT / "bench"))

import normalize as normalize_bench  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue  # noqa: E402

from tpmledger.ingest import normalize  # noqa: E402
from tpmledger.ingest.quota_headers import NO_QUOTA, quota_values  # noqa: E402

HEADERS = {
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-tokens": "149000",
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "499",
    "retry-after": "1",
}


def _with_headers(payload_request: object) -> bytes:
    request = normalize_bench.build_request(512)
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                for name, value in HEADERS.items():
                    array = ArrayValue(values=[AnyValue(string_value=value)])
                    span.attributes.append(
                        KeyValue(
                            key=f"http.response.header.{name}", value=AnyValue(array_value=array)
                        )
                    )
    return request.SerializeToString()


def _rate(payload: bytes, seconds: float) -> float:
    loops, cpu = 0, time.process_time()
    while time.process_time() - cpu < seconds:
        normalize.normalize_payload(payload)
        loops += 1
    return loops * 512 / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plain = normalize_bench.build_request(512).SerializeToString()
    headers = _with_headers(None)
    batch = normalize.normalize_payload(headers)
    assert batch.rows[0][-8:] == (None, None, 150000.0, 500.0, 149000.0, 499.0, 1.0, 0)
    constant: Callable[..., tuple[object, ...]] = lambda span, resource: NO_QUOTA  # noqa: E731
    # The baseline's span plans must not read quotas either: on plain spans the plan's flag
    # is False already, so the baseline and "no rate-limit keys" differ by nothing but the
    # flag's cost (computed once per key shape).
    cases = (
        ("baseline (reader replaced by a constant)", plain, constant),
        ("no rate-limit keys", plain, quota_values),
        ("headers on every span, reader replaced by a constant", headers, constant),
        ("headers on every span", headers, quota_values),
    )
    rates: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    for _ in range(args.rounds):
        for label, payload, reader in cases:
            normalize.quota_values = reader  # type: ignore[assignment]
            rates[label].append(_rate(payload, args.seconds))
    normalize.quota_values = quota_values  # type: ignore[assignment]
    print(
        f"# .venv/bin/python bench/quota_headers.py --seconds {args.seconds} --rounds {args.rounds}"
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# Python {platform.python_version()}, load average {load}; best of {args.rounds}")
    best = {label: max(found) for label, found in rates.items()}
    for index, (label, _, _) in enumerate(cases):
        base = best[cases[0 if index < 2 else 2][0]]  # each payload against its own baseline
        print(f"{label}: {best[label]:,.0f} spans/s of CPU time, ratio {best[label] / base:.3f}")


if __name__ == "__main__":
    main()
