"""What a failed span says about its failure, in every family's spelling.

The outcome columns of an attempt (docs/conventions.md#failures): ``status`` (``ok`` /
``error``), ``error_type`` and ``http_status``. Families report a failure differently:

- OTel contrib ``openai-v2`` and OpenLLMetry set ``error.type`` to the exception's class
  (``RateLimitError``); HTTP client spans set it to the status code (``429``) and
  ``http.response.status_code``;
- OpenInference sets only the span status, whose description is the exception's text
  (``Error code: 429 - {…}``), and records an ``exception`` event with ``exception.type``
  (``openai.RateLimitError``);
- some SDKs write ``error.code`` (``429``, ``rate_limit_exceeded``).

``error_type`` = ``error.type``, else the ``exception`` event's type without its module
(``RateLimitError``), else ``error.code``, else ``http_<status>``, else ``error``.
``http_status``, when no attribute gives it, is read from a description that quotes one
(``Error code: 429``). Which failures are rate limits or serving failures is decided
from these columns where figures are made (storage/readers/target_minutes.py).
"""

from __future__ import annotations

import re
from typing import Any, Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

_STATUS_ERROR: Final = Status.STATUS_CODE_ERROR
_EXCEPTION_EVENT: Final = "exception"
_EXCEPTION_TYPE: Final = "exception.type"
_CODE_IN_TEXT: Final = re.compile(rb"[Ee]rror code:? ?([1-5][0-9][0-9])\b")
#: error.code values that mean the call failed (the provider's rate limit).
_FAILING_CODES: Final = ("429", "rate_limit")


def _exception_type(span: Any) -> str | None:
    """The ``exception.type`` of the span's first ``exception`` event, module dropped."""
    for raw in span.events:
        try:
            event = Span.Event.FromString(raw)
        except DecodeError:
            continue
        if event.name != _EXCEPTION_EVENT:
            continue
        for attribute in event.attributes:
            if attribute.key == _EXCEPTION_TYPE and attribute.value.string_value:
                return attribute.value.string_value.rsplit(".", 1)[-1][:200]
    return None


def failure(
    span: Any, error_type: str | None, error_code: str | None, http_status: int | None
) -> tuple[str, str | None, int | None]:
    """``(status, error_type, http_status)`` of a span (see the module docstring)."""
    failed = (
        span.status.code == _STATUS_ERROR
        or error_type is not None
        or (http_status is not None and http_status >= 400)
        or (error_code is not None and error_code.lower().startswith(_FAILING_CODES))
    )
    if not failed:
        return "ok", None, http_status
    if http_status is None:
        quoted = _CODE_IN_TEXT.search(span.status.message)
        if quoted is not None:
            http_status = int(quoted.group(1))
    if error_type is None and span.events:
        error_type = _exception_type(span)
    if error_type is None:
        if error_code:
            error_type = error_code
        elif http_status is not None and http_status >= 400:
            error_type = f"http_{http_status}"
        else:
            error_type = "error"
    return "error", error_type, http_status
