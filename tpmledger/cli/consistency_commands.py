"""``tpmledger summary prove-consistency|verify-consistency``.

See docs/provenance.md#consistency-proofs.

``prove-consistency`` reads two sealed versions' stored minute leaves and prints the RFC
9162 proof that the later minute tree extends the earlier one, or refuses (exit 1) naming
the minutes that changed. ``verify-consistency`` checks such a file offline; with the two
versions' signed summaries it also checks that the roots are the signed ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

EXIT_REFUSED = 1


def register(actions: Any) -> None:
    """Add the two actions to ``tpmledger summary``."""
    prove = actions.add_parser(
        "prove-consistency",
        help="prove that a later sealed version extends an earlier one (RFC 9162)",
        description="Prints {run_id, from, to, proof}: the minute Merkle tree of version TO "
        "extends that of version FROM, so figures published from FROM still stand in TO. "
        "Refused, naming the minutes, when late data changed a minute FROM already held.",
    )
    prove.add_argument("run_id", metavar="RUN")
    prove.add_argument("--from", dest="old", type=int, required=True, metavar="A")
    prove.add_argument("--to", dest="new", type=int, required=True, metavar="B")
    prove.add_argument("--out", type=Path, metavar="FILE", help="write here instead of stdout")
    add_data_dir_option(prove)
    prove.set_defaults(func=prove_consistency)

    verify = actions.add_parser(
        "verify-consistency",
        help="verify a consistency proof file offline",
        description="Checks the proof against the two roots in the file; with --from-summary "
        "and --to-summary (summary.dsse.json of each version's export, already verified with "
        "`tpmledger summary verify`) also that those roots are the signed ones.",
    )
    verify.add_argument("path", type=Path, metavar="FILE")
    verify.add_argument("--from-summary", type=Path, metavar="ENVELOPE")
    verify.add_argument("--to-summary", type=Path, metavar="ENVELOPE")
    verify.set_defaults(func=verify_consistency_file)


def prove_consistency(args: argparse.Namespace) -> int:
    from tpmledger.analytics.proofs.version_consistency import ConsistencyRefused, prove_consistency

    with database(settings_from_args(args), migrate_to_head=True) as url:
        try:
            document = prove_consistency(url, args.run_id, args.old, args.new)
        except ConsistencyRefused as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return EXIT_REFUSED
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _predicate(path: Path) -> dict[str, Any]:
    import base64

    from tpmledger.provenance.in_toto_statement import parse_statement

    envelope = json.loads(path.read_text())
    return dict(parse_statement(base64.b64decode(envelope["payload"]))["predicate"])


def verify_consistency_file(args: argparse.Namespace) -> int:
    from tpmledger.provenance.consistency_document import check_against_summary, check_consistency

    try:
        document = json.loads(args.path.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.path}: {exc}", file=sys.stderr)
        return 2
    problems = [p for p in [check_consistency(document)] if p]
    for side, path in (("from", args.from_summary), ("to", args.to_summary)):
        if path is not None and not problems:
            try:
                problem = check_against_summary(document, side, _predicate(path))
            except (OSError, ValueError, KeyError) as exc:
                problem = f"cannot read the {side!r} summary {path}: {exc}"
            if problem:
                problems.append(problem)
    old, new = document.get("from", {}), document.get("to", {})
    if problems:
        for problem in problems:
            print(f"FAILED: {problem}")
        return 1
    print(
        f"OK: version {new.get('version')} of {document.get('run_id')} ({new.get('tree_size')} "
        f"minutes, root {new.get('merkle_root')}) extends version {old.get('version')} "
        f"({old.get('tree_size')} minutes, root {old.get('merkle_root')})"
    )
    return 0
