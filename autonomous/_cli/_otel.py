"""OpenTelemetry for the commands that run agents, set up from the standard ``OTEL_*`` variables.

The library never configures a global provider: a program does. The ``autonomous`` command is
such a program, so when the OpenTelemetry SDK is installed (the ``otel`` extra) and the
environment names exporters, ``run``, ``resume`` and ``daemon`` set up the SDK's tracer and
meter providers the way the SDK's own auto-configuration would (``opentelemetry-instrument``
with a distro does it too, for a program that does not):

- ``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER``: comma-separated exporter names, each
  found among the installed packages' entry points (``console`` comes with the SDK; ``otlp``
  with ``opentelemetry-exporter-otlp``); ``none`` or unset: that signal is not set up. A name
  no installed package provides is a usage error.
- ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``: the resource; ``OTEL_TRACES_SAMPLER``
  and the ``OTEL_BSP_*`` / ``OTEL_METRIC_EXPORT_*`` variables as the SDK reads them;
  ``OTEL_EXPORTER_OTLP_*`` as the OTLP exporters read them; ``OTEL_SDK_DISABLED=true`` turns
  it all off.

Nothing is set up when something already set a provider (``opentelemetry-instrument``, a
``sitecustomize``), except that a tracer provider ``OTEL_PYTHON_TRACER_PROVIDER`` loaded (it
has no exporters of its own) gets the exporters ``OTEL_TRACES_EXPORTER`` names. The console
exporters write to standard error here, not to standard output, which carries the commands'
own output (``--json``). Spans are exported in batches, the last of them when the process
exits.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from typing import Any

from ._common import CliError
from ._exits import Exit

#: The API's variable naming a tracer provider to load (the SDK's: ``sdk_tracer_provider``).
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
#: The variables that name each signal's exporters, and their entry point groups.
_SIGNALS = {
    "OTEL_TRACES_EXPORTER": "opentelemetry_traces_exporter",
    "OTEL_METRICS_EXPORTER": "opentelemetry_metrics_exporter",
}


def configure_from_environment() -> None:
    """Set up the SDK's global tracer and meter providers as the ``OTEL_*`` variables say;
    nothing when they name no exporter, the SDK is off or missing, or a provider is set.

    Raises:
        CliError: an exporter that no installed package provides (or the SDK missing while
            the variables name exporters).
    """
    wanted = {variable: _names(variable) for variable in _SIGNALS}
    if not any(wanted.values()) or _disabled():
        return
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.resources import Resource
    except ImportError as exc:
        raise CliError(
            f"{' and '.join(v for v, names in wanted.items() if names)} name OpenTelemetry"
            f" exporters, but the SDK is not installed ({exc}):"
            " pip install 'bounded-autonomous[otel]'",
            Exit.USAGE,
        ) from None
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    traces = [_exporter(v, n) for v in ("OTEL_TRACES_EXPORTER",) for n in wanted[v]]
    readers = [_exporter(v, n) for v in ("OTEL_METRICS_EXPORTER",) for n in wanted[v]]
    if traces:
        current = trace.get_tracer_provider()
        if type(current).__name__ == "ProxyTracerProvider":
            trace.set_tracer_provider(_tracer_provider(resource, traces))
        elif _PROVIDER_VARIABLE in os.environ and hasattr(current, "add_span_processor"):
            _export_to(current, traces)  # made from the environment, and without exporters
    if readers and type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider":
        metrics.set_meter_provider(_meter_provider(resource, readers))


def _names(variable: str) -> list[str]:
    """The exporter names ``variable`` lists (none for ``none`` or an unset variable)."""
    names = [n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()]
    return [] if [n.lower() for n in names] == ["none"] else names


def _disabled() -> bool:
    """Whether ``OTEL_SDK_DISABLED`` turns the SDK off."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _exporter(variable: str, name: str) -> Any:
    """An exporter (or a metric reader) of the entry point ``name`` of ``variable``'s group;
    the console ones writing to standard error."""
    group = _SIGNALS[variable]
    found = entry_points(group=group, name=name)
    if not found:
        raise CliError(
            f"{variable} names the OpenTelemetry exporter {name!r}, which no installed package"
            f" provides (entry point group {group}): install it, or name another"
            " (console comes with the SDK; otlp with opentelemetry-exporter-otlp)",
            Exit.USAGE,
        )
    made = next(iter(found)).load()
    return made(out=sys.stderr) if name == "console" else made()


def _tracer_provider(resource: Any, exporters: list[Any]) -> Any:
    """The SDK's tracer provider, exporting in batches to ``exporters`` (sampler as the
    environment says; its spans are flushed when the process exits)."""
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider(resource=resource)
    _export_to(provider, exporters)
    return provider


def _export_to(provider: Any, exporters: list[Any]) -> None:
    """Have ``provider`` export its spans to ``exporters``, in batches."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))


def _meter_provider(resource: Any, exporters: list[Any]) -> Any:
    """The SDK's meter provider, each exporter read periodically (a reader as it is)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    readers = [
        e if isinstance(e, MetricReader) else PeriodicExportingMetricReader(e) for e in exporters
    ]
    return MeterProvider(resource=resource, metric_readers=readers)
