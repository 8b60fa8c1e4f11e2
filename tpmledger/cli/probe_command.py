"""``tpmledger probe URL``: exit 0 when URL answers 200 (container healthchecks use it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe",
        help="check that a tpmledger endpoint answers 200 (for healthchecks)",
        description="GET the URL; exit 0 on HTTP 200, 1 otherwise. Used by the Docker "
        "healthchecks, e.g. `tpmledger probe http://127.0.0.1:4318/readyz`.",
    )
    p.add_argument("url", help="URL to GET, e.g. http://127.0.0.1:4318/readyz")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    p.set_defaults(func=run_probe)


def run_probe(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as response:
            ok = response.status == 200
    except (urllib.error.URLError, OSError) as exc:
        print(f"{args.url}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.url}: {'ok' if ok else 'not ready'}")
    return 0 if ok else 1
