"""Tracing with OpenTelemetry: off (and free) unless :func:`enable` is called.

When enabled, a message sent while a span is current carries that span's context inside
its envelope (:class:`Traced`): a long-lived actor does not inherit its sender's context
by itself, so the kernel opens the receiving span under the context the message brought,
and whatever the actor sends from there carries the new span on. An API request, the chat
request it runs and every actor message those cause are then one trace.

Disabled, nothing is wrapped and no span is made: what is left is one module-level
``enabled`` test per send and one type test per message handled. The ``opentelemetry``
packages are needed only to enable it (``pip install 'greenroom[otel]'``); no user id or
message content goes into a span.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

enabled = False
"""Read by the kernel on every send; flip it only through :func:`enable` / :func:`disable`."""

_tracer: Any = None
_otel_context: Any = None
_otel_trace: Any = None


class Traced:
    """A message and the OpenTelemetry context it was sent in (the kernel unwraps it)."""

    __slots__ = ("context", "message")

    def __init__(self, message: Any, context: Any) -> None:
        self.message = message
        self.context = context


def enable(tracer_provider: Any = None) -> None:
    """Start tracing with ``tracer_provider`` (default: the global one OpenTelemetry's
    SDK or its auto-configuration set up). Raises ``ImportError`` naming the extra when
    ``opentelemetry`` is not installed."""
    global enabled, _tracer, _otel_context, _otel_trace
    try:
        from opentelemetry import context, trace
    except ImportError as error:  # pragma: no cover - the extra is in the test environment
        raise ImportError("tracing needs OpenTelemetry: pip install 'greenroom[otel]'") from error
    from . import __version__

    _otel_context, _otel_trace = context, trace
    _tracer = trace.get_tracer("greenroom", __version__, tracer_provider=tracer_provider)
    enabled = True


def disable() -> None:
    global enabled
    enabled = False


def isolate() -> None:
    """Drop the OpenTelemetry context a new task inherited from the one that spawned it
    (the kernel's workers serve every actor: a span current where a worker happened to
    be started must not become the parent of unrelated messages). Free when
    ``opentelemetry`` was never imported."""
    otel = sys.modules.get("opentelemetry.context")
    if otel is not None:
        otel.attach(otel.Context())


def wrap(message: Any) -> Any:
    """``message`` in a :class:`Traced` envelope if a span is current, else as it is."""
    current = _otel_context.get_current()
    if not _otel_trace.get_current_span(current).get_span_context().is_valid:
        return message
    return Traced(message, current)


def unwrap(message: Any) -> Any:
    return message.message if type(message) is Traced else message


@contextmanager
def receiving(actor: str, message: Any, context: Any) -> Iterator[None]:
    """The span of one message's handling, a child of the context it was sent in."""
    kind = _otel_trace.SpanKind.CONSUMER
    attributes = {"greenroom.actor": actor, "greenroom.message": type(message).__name__}
    with _tracer.start_as_current_span(
        f"{actor} {type(message).__name__}", context=context, kind=kind, attributes=attributes
    ):
        yield


def record_failure(error: BaseException) -> None:
    """Mark the current span as failed by ``error`` (its type and text, no locals)."""
    span = _otel_trace.get_current_span()
    span.record_exception(error)
    span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, type(error).__name__))


@contextmanager
def span(
    name: str, *, kind: str = "INTERNAL", parent_headers: Any = None, attributes: dict[str, Any] | None = None
) -> Iterator[Any]:
    """A span around a unit of work (an API request, a chat request); a no-op yielding
    ``None`` when tracing is off. ``parent_headers``: incoming HTTP headers, whose
    ``traceparent`` (W3C) makes the span a child of the caller's."""
    if not enabled:
        yield None
        return
    context = None
    if parent_headers is not None:
        from opentelemetry import propagate

        context = propagate.extract(parent_headers)
    with _tracer.start_as_current_span(
        name, context=context, kind=getattr(_otel_trace.SpanKind, kind), attributes=attributes
    ) as current:
        yield current


def setup_sdk(exporter: str, service_name: str) -> Any:
    """Build an SDK ``TracerProvider`` exporting in batches (``"otlp"``: OTLP over HTTP to
    ``$OTEL_EXPORTER_OTLP_ENDPOINT``; ``"console"``: standard output), enable tracing with
    it, and return it (call its ``shutdown()`` at exit to flush)."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as error:
        raise ImportError("tracing needs OpenTelemetry's SDK: pip install 'greenroom[otel]'") from error
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as error:
            raise ImportError("the OTLP exporter needs: pip install 'greenroom[otel]'") from error
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    enable(provider)
    return provider
