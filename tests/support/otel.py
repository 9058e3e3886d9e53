"""A Telemetry on the OpenTelemetry SDK's in-memory span exporter and metric reader, for tests
that look at what a run reported (never the global providers)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from autonomous._observe._telemetry import Telemetry

#: Attribute pairs, sorted: how a metric's data point is told apart.
Pairs = tuple[tuple[str, Any], ...]


class Otel:
    """``telemetry``, wired to an in-memory span exporter (``spans``) and reader (``metrics``)."""

    def __init__(self, *, capture_content: bool | None = None) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.telemetry = Telemetry.create(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            capture_content=capture_content,
        )

    def finished(self) -> list[ReadableSpan]:
        """The finished spans, in the order they ended."""
        return list(self.spans.get_finished_spans())

    def by_name(self) -> dict[str, ReadableSpan]:
        """The finished spans by name (the last of each name)."""
        return {span.name: span for span in self.finished()}

    def named(self, name: str) -> list[ReadableSpan]:
        """The finished spans called ``name``."""
        return [s for s in self.finished() if s.name == name]

    def metric(self, name: str) -> Metric:
        """The metric called ``name``."""
        for metric in self._metrics():
            if metric.name == name:
                return metric
        raise AssertionError(f"no metric {name}")

    def points(self, name: str) -> dict[Pairs, HistogramDataPoint]:
        """The histogram ``name``'s points by their sorted attribute pairs."""
        found = {}
        for point in self.metric(name).data.data_points:
            assert isinstance(point, HistogramDataPoint)
            found[tuple(sorted((point.attributes or {}).items()))] = point
        return found

    def counters(self) -> dict[str, dict[Pairs, float]]:
        """Each counter's value by its sorted attribute pairs, by counter name (the GenAI
        histograms left out)."""
        return {
            metric.name: {
                tuple(sorted((p.attributes or {}).items())): p.value  # type: ignore[union-attr]
                for p in metric.data.data_points
            }
            for metric in self._metrics()
            if not metric.name.startswith("gen_ai.")
        }

    def _metrics(self) -> list[Metric]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
