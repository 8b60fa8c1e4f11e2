"""Failures ingest did not expect: answered retryable, counted apart, logged once per cause.

A bug in normalizing or storing must neither drop a fleet's spans (a permanent 400 would:
exporters do not retry it) nor flood the log (every sender retries the same payload). So
:meth:`InternalErrors.record` counts every occurrence on ``/metrics``
(``tpmledger_ingest_internal_errors_total{stage}``), logs the first occurrence of each
cause with its traceback and the run ids of the request that hit it, and returns the
:class:`~ingest.error_taxonomy.InternalFailure` (503 / ``UNAVAILABLE`` + retry hint) to
answer with. A cause is the stage, the exception's type and the line that raised it.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Callable, Iterable

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tpmledger.ingest.error_taxonomy import InternalFailure
from tpmledger.ingest.metrics import IngestMetrics

log = logging.getLogger(__name__)

RUN_ID_KEY = "tpmledger.run.id"
_MAX_CAUSES = 1024  # distinct causes remembered; past it every failure is logged again
_MAX_RUN_IDS = 10  # run ids quoted in one log line
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


class InternalErrors:
    """The counter and the once-per-cause log of unexpected ingest failures."""

    def __init__(self, metrics: IngestMetrics, retry_after_s: int = 2) -> None:
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()  # the writer's lanes record from their threads too

    def record(
        self, stage: str, exc: BaseException, run_ids: Callable[[], Iterable[str]]
    ) -> InternalFailure:
        """Count ``exc`` (raised while ``stage`` ran), log it if its cause is new, and return
        the retryable error to answer with. ``run_ids`` is called only when logging."""
        self._metrics.internal_errors.labels(stage).inc()
        cause = (stage, type(exc).__name__, _raising_line(exc))
        with self._lock:
            first = cause not in self._seen
            if first and len(self._seen) < _MAX_CAUSES:
                self._seen.add(cause)
        if first:
            log.error(
                "unexpected failure while %s a request (answered 503, the sender retries; "
                "logged once per cause, counted in tpmledger_ingest_internal_errors_total) "
                "runs %s",
                "normalizing" if stage == "normalize" else "storing",
                _quoted(run_ids),
                exc_info=exc,
            )
        return InternalFailure(
            f"ingest failed unexpectedly while handling this request ({type(exc).__name__}); "
            "retry later",
            retry_after_s=self._retry_after_s,
        )


def payload_run_ids(payload: bytes | bytearray) -> list[str]:
    """The ``tpmledger.run.id`` resource attributes of a serialized export request (best
    effort: empty if it does not decode)."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(bytes(payload))
    except (DecodeError, RecursionError, ValueError):
        return []
    found: dict[str, None] = {}
    for spans in request.resource_spans:
        for attribute in spans.resource.attributes:
            if attribute.key == RUN_ID_KEY and attribute.value.string_value:
                found[attribute.value.string_value] = None
    return list(found)


def _raising_line(exc: BaseException) -> str:
    remote = exc.__cause__  # raised in a normalizer process: its traceback came as text
    if remote is not None and type(remote).__name__ == "_RemoteTraceback":
        lines = _FILE_LINE.findall(str(remote))
        return ":".join(lines[-1]) if lines else ""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f"{last.filename}:{last.lineno}"


def _quoted(run_ids: Callable[[], Iterable[str]]) -> str:
    try:
        ids = sorted(run_ids())
    except Exception:  # the log line must not fail on the request that broke ingest
        return "(unknown)"
    if not ids:
        return "(none found)"
    shown = ", ".join(ids[:_MAX_RUN_IDS])
    return shown + (f" and {len(ids) - _MAX_RUN_IDS} more" if len(ids) > _MAX_RUN_IDS else "")
