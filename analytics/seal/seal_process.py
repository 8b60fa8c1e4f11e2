"""A seal run in a Python process of its own: the memory of a seal is never its caller's.

A seal holds hundreds of MB for millions of attempts (its own budget, docs/configuration.md
#memory), and a long-running Python process keeps much of that after the seal returns. So
every process that seals as part of something else starts a child (``python -m`` this
module) whose memory goes back to the system when it exits, and never loads the seal path
itself:

- ``tpmledger summary export`` and ``tpmledger prune`` stream a run's event file a range of
  minutes at a time (docs/provenance.md#streaming-seal); a run not sealed up to its newest
  spans is sealed first (:func:`seal_in_own_process`; a run already sealed final with
  nothing newer starts no child);
- the analytics worker's reseal loop and checkpoints (``analytics/worker.py``,
  :mod:`~tpmledger.analytics.seal.checkpoints`) seal through :func:`seal_run_in_child`: the
  child seals with the worker's SLO and, for a checkpoint, the end of the closed minutes,
  and reports back on one JSON line what the worker logs (created, version, seal,
  attempts, stage times, its own peak memory) and returns (the :class:`SealResult`).

The caller keeps the replica rules: it holds the run's sealing claim
(``storage.writers.snapshot_store.sealing_claim``) around the child, and the child's seal takes the
run's sealing lock when it stores a version, as an in-process seal does.

The child reads the database URL from its environment (never its command line, which
other users can list) and reports a failure as one JSON line on its standard output,
raised here as :class:`SealFailed`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the caller never loads the seal path: only the child does
    from tpmledger.analytics.seal.sealing import SealResult
    from tpmledger.slo import Slo

#: Where the child finds the database URL.
URL_VARIABLE = "TPMLEDGER_SEAL_DATABASE_URL"


class SealFailed(RuntimeError):
    """The child could not seal the run: ``kind`` is the exception's class name (e.g.
    ``RunTooLong``, ``UnknownRun``), ``message`` its message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class ChildSeal:
    """What a child's seal reports: the run's newest version after it (``result``), the
    wall seconds per stage (``stages``: read, analysis, file, store…) and the child's peak
    resident memory in bytes (``peak_rss_bytes``; None when it could not be read)."""

    result: SealResult
    stages: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int | None = None


def seal_in_own_process(url: str, run_id: str, *, even_if_current: bool = False) -> bool:
    """Seal ``run_id`` in a child process unless its newest version is final and nothing
    arrived since (``even_if_current``: recompute it anyway, a new version only if it
    changed, as ``seal_run`` does); True when a child ran. Raises :class:`SealFailed`
    when the seal fails. Takes a URL: a child-process launcher (the URL crosses the process
    boundary)."""
    from tpmledger.analytics.seal.sealing import seal_is_current
    from tpmledger.storage.server.database import in_one_snapshot

    if not even_if_current and in_one_snapshot(url, seal_is_current, run_id):
        return False
    arguments = ["--even-if-current"] if even_if_current else []
    _run_child(url, run_id, arguments)
    return True


def seal_run_in_child(
    url: str,
    run_id: str,
    *,
    slo: Slo | None = None,
    end_before_ns: int | None = None,
    quiet_s: float | None = None,
) -> ChildSeal:
    """``seal_run(url, run_id, slo=…, end_before_ns=…, quiet_s=…)`` in a child process: a
    new version if the run's figures changed (or the newest one), with the child's stage
    times and peak memory. Raises :class:`SealFailed` when the seal fails (``kind`` is
    e.g. ``RunTooLong``). Takes a URL: a child-process launcher (the URL crosses the
    process boundary)."""
    arguments = ["--report"]
    if slo is not None and slo.text:
        arguments += ["--slo", slo.text]
    if end_before_ns is not None:
        arguments += ["--end-before-ns", str(end_before_ns)]
    if quiet_s is not None:
        arguments += ["--quiet-s", repr(float(quiet_s))]
    report = _report(_run_child(url, run_id, arguments))
    if report is None:
        raise SealFailed("SealFailed", f"the seal of run {run_id!r} reported nothing")
    return _child_seal(report)


def _run_child(url: str, run_id: str, arguments: list[str]) -> str:
    """Run the child; its standard output, or :class:`SealFailed`. Takes a URL: it passes it
    to the child (through the environment)."""
    done = subprocess.run(
        [sys.executable, "-P", "-m", __name__, run_id, *arguments],
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
    return done.stdout


def _json_lines(output: str) -> list[dict[str, Any]]:
    lines = []
    for line in output.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines


def _failure(output: str) -> tuple[str, str] | None:
    for report in reversed(_json_lines(output)):
        if "kind" in report and "message" in report:
            return str(report["kind"]), str(report["message"])
    return None


def _report(output: str) -> dict[str, Any] | None:
    for report in reversed(_json_lines(output)):
        if "seal" in report and "version" in report:
            return report
    return None


def _child_seal(report: dict[str, Any]) -> ChildSeal:
    from tpmledger.analytics.seal.sealing import SealResult

    as_of = report.get("data_as_of")
    result = SealResult(
        run_id=str(report["run_id"]),
        version=int(report["version"]),
        seal=str(report["seal"]),
        created=bool(report["created"]),
        metrics=dict(report["metrics"]),
        document=dict(report["document"]),
        final=bool(report["final"]),
        data_as_of=datetime.fromisoformat(as_of) if as_of else None,
    )
    peak = report.get("peak_rss_bytes")
    stages = {str(name): float(s) for name, s in dict(report.get("stages") or {}).items()}
    return ChildSeal(result, stages, int(peak) if peak is not None else None)


def _peak_rss_bytes() -> int | None:
    """This process's VmHWM (peak resident set), None where /proc is not readable."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def main(argv: list[str]) -> int:
    """The child: seal ``argv[0]`` on the URL of :data:`URL_VARIABLE`."""
    from tpmledger.storage.server.database import owned_engines

    run_id, options = argv[0], argv[1:]
    url = os.environ[URL_VARIABLE]
    with owned_engines():  # the child's engines end with it
        return _seal(run_id, options, url)


def _seal(run_id: str, options: list[str], url: str) -> int:
    """The child's seal. Takes a URL: it calls the entry points ``seal_run`` /
    ``seal_unless_current``, which open their own views."""
    from tpmledger.analytics.seal.compile_notice import ensure_kernels
    from tpmledger.analytics.seal.run_computation import StageTimer
    from tpmledger.analytics.seal.sealing import seal_run, seal_unless_current
    from tpmledger.slo import optional_slo

    try:
        ensure_kernels()  # a line on stderr if they must be compiled (first run only)
        if "--report" in options:
            end_before = _option(options, "--end-before-ns")
            quiet = _option(options, "--quiet-s")
            timer = StageTimer()
            result = seal_run(
                url,
                run_id,
                timer=timer,
                slo=optional_slo(_option(options, "--slo")),
                end_before_ns=int(end_before) if end_before is not None else None,
                quiet_s=float(quiet) if quiet is not None else None,
            )
            report = {
                "run_id": result.run_id,
                "version": result.version,
                "seal": result.seal,
                "created": result.created,
                "final": result.final,
                "data_as_of": result.data_as_of.isoformat() if result.data_as_of else None,
                "metrics": result.metrics,
                "document": result.document,
                "stages": timer.seconds,
                "peak_rss_bytes": _peak_rss_bytes(),
            }
            print(json.dumps(report), flush=True)
        elif "--even-if-current" in options:
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
