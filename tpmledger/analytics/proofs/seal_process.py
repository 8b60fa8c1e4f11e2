"""The seal an export or an archive needs, run in a Python process of its own.

``tpmledger summary export`` and ``tpmledger prune`` stream a run's event file, a range
of minutes at a time, so their memory follows a chunk, not the run (docs/provenance.md
#streaming-seal). A run that is not sealed up to its newest spans must be sealed first,
and a seal holds hundreds of MB for millions of attempts (its own budget: the analytics
worker's). That seal therefore runs in a child process (``python -m`` this module), whose
memory is returned to the system when it exits; the exporting or archiving process never
loads the seal's kernels. A run already sealed final with nothing newer starts no child.

The child reads the database URL from its environment (never its command line, which
other users can list) and reports a failure as one JSON line on its standard output,
raised here as :class:`SealFailed`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: Where the child finds the database URL.
URL_VARIABLE = "TPMLEDGER_SEAL_DATABASE_URL"


class SealFailed(RuntimeError):
    """The child could not seal the run: ``kind`` is the exception's class name (e.g.
    ``RunTooLong``, ``UnknownRun``), ``message`` its message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def seal_in_own_process(url: str, run_id: str, *, even_if_current: bool = False) -> bool:
    """Seal ``run_id`` in a child process unless its newest version is final and nothing
    arrived since (``even_if_current``: recompute it anyway, a new version only if it
    changed, as ``seal_run`` does); True when a child ran. Raises :class:`SealFailed`
    when the seal fails."""
    from tpmledger.analytics.seal.sealing import seal_is_current

    if not even_if_current and seal_is_current(url, run_id):
        return False
    command = [sys.executable, "-m", __name__, run_id]
    if even_if_current:
        command.append("--even-if-current")
    done = subprocess.run(
        command,
        env={**os.environ, URL_VARIABLE: url},
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        failure = _failure(done.stdout)
        raise (
            SealFailed(*failure)
            if failure
            else SealFailed(
                "SealFailed", f"the seal of run {run_id!r} exited with status {done.returncode}"
            )
        )
    return True


def _failure(output: str) -> tuple[str, str] | None:
    for line in reversed(output.splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and "kind" in report and "message" in report:
            return str(report["kind"]), str(report["message"])
    return None


def main(argv: list[str]) -> int:
    """The child: seal ``argv[0]`` on the URL of :data:`URL_VARIABLE`."""
    from tpmledger.analytics.seal.compile_notice import ensure_kernels
    from tpmledger.analytics.seal.sealing import seal_run, seal_unless_current

    run_id, even_if_current = argv[0], "--even-if-current" in argv[1:]
    url = os.environ[URL_VARIABLE]
    try:
        ensure_kernels()  # a line on stderr if they must be compiled (first run only)
        if even_if_current:
            seal_run(url, run_id)
        else:
            seal_unless_current(url, run_id)
    except Exception as exc:  # reported to the parent, which decides what it means
        message = str(exc.args[0]) if exc.args else str(exc)
        print(json.dumps({"kind": type(exc).__name__, "message": message}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
