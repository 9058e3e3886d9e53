"""The run's observer: each event reported once reaches the log, the supervisor's window, the
progress consumers and telemetry; listeners hear of a held answer once its checkpoint is in."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import structlog
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from autonomous import ToolOutcome
from autonomous._observe._observer import Observer
from autonomous._observe._supervisor import RecentEvents
from autonomous._observe._telemetry import Telemetry
from autonomous._progress import (
    CheckpointWritten,
    ModelCalled,
    ModelCalling,
    Paused,
    ProgressEvent,
    ProgressHub,
    Resumed,
    RunExited,
    Sleeping,
    ToolCalled,
    ToolCalling,
    TurnFinished,
    TurnStarted,
)

pytestmark = pytest.mark.anyio


class TestFanOut:
    async def test_with_nobody_listening_an_event_is_logged(self) -> None:
        """No callback, reader, supervisor or telemetry: the event is logged under its name."""
        observer = Observer()
        with structlog.testing.capture_logs() as logs:
            await observer.emit(ToolCalled(3, "check_disk", ToolOutcome.OK))
        assert [("tool_call", 3, "check_disk", "ok")] == [
            (e["event"], e["turn"], e["tool"], e["outcome"]) for e in logs
        ]

    async def test_fields_given_with_an_event_go_on_its_log_line(self) -> None:
        """What a site knows besides the event (a turn's inbox size) is logged with it, and
        only logged: the event the consumers get is the event."""
        seen: list[ProgressEvent] = []
        observer = Observer(hub=ProgressHub(lambda turn, event: seen.append(event)))
        with structlog.testing.capture_logs() as logs:
            await observer.emit(TurnStarted(2, 1), inbox=3, resumed=False)
        assert ([TurnStarted(2, 1)], [("turn_started", 2, 3, False)]) == (
            seen,
            [(e["event"], e["turn"], e["inbox"], e["resumed"]) for e in logs],
        )

    async def test_the_window_sees_an_event_before_the_callback(self) -> None:
        """The supervisor's window records an event before the progress callback gets it."""
        seen: list[tuple[str, ProgressEvent]] = []
        recent = RecentEvents()

        def callback(turn: int, event: ProgressEvent) -> None:
            seen.append(("callback", event))
            assert event in recent.events

        observer = Observer(hub=ProgressHub(callback), recent=recent)
        event = TurnFinished(2, 1, "ModelError")
        await observer.emit(event)
        assert ([("callback", event)], (event,), "ModelError") == (
            seen,
            recent.events,
            recent.last_turn_error,
        )

    async def test_a_stream_reader_gets_the_events(self) -> None:
        """A reader subscribed through the observer gets the events reported after it."""
        observer = Observer()
        reader = observer.subscribe()
        await observer.emit(ToolCalled(1, "t", ToolOutcome.ERROR))
        observer.close()
        assert [ToolCalled(1, "t", "error")] == [event async for event in reader]

    async def test_the_start_of_a_call_and_of_a_sleep_are_reported(self) -> None:
        """A model call, a tool call and a sleep report their start; only the sleep is
        logged (with its wake time), the calls are logged when they end."""
        seen: list[ProgressEvent] = []
        observer = Observer(hub=ProgressHub(lambda turn, event: seen.append(event)))
        until = datetime(2030, 1, 1, 12, tzinfo=UTC)
        with structlog.testing.capture_logs() as logs:
            await observer.emit(ModelCalling(2, "m"))
            await observer.emit(ToolCalling(2, "t"))
            await observer.emit(Sleeping(2, until))
        assert [ModelCalling(2, "m"), ToolCalling(2, "t"), Sleeping(2, until)] == seen
        assert [("sleeping", until.isoformat())] == [(e["event"], e["until"]) for e in logs]

    async def test_the_start_of_a_call_stays_out_of_the_supervisor_s_window(self) -> None:
        """The supervisor's window gets a call's end, not its start (at a turn boundary every
        call has ended); a sleep's start it does get."""
        recent = RecentEvents()
        observer = Observer(recent=recent)
        until = datetime(2030, 1, 1, 12, tzinfo=UTC)
        await observer.emit(ModelCalling(1, "m"))
        await observer.emit(ToolCalling(1, "t"))
        await observer.emit(Sleeping(1, until))
        assert (Sleeping(1, until),) == recent.events

    def test_for_run_gives_a_window_only_to_a_supervised_run(self) -> None:
        """A run with a supervisor gets a window; one without none."""
        telemetry = Telemetry.disabled()
        supervised = Observer.for_run(progress=None, supervised=True, telemetry=telemetry)
        plain = Observer.for_run(progress=None, supervised=False, telemetry=telemetry)
        assert (True, False) == (supervised.recent is not None, plain.recent is not None)


ANSWER = ModelCalled(1, "m", 10, 5, 0.0, 0)


class TestHeldAnswers:
    async def test_a_held_answer_reaches_listeners_with_its_checkpoint(self) -> None:
        """An answer held for the checkpoint after it, and what follows it, reach the window
        and the callback once the checkpoint is reported, in order; the log has them at once."""
        seen: list[ProgressEvent] = []
        recent = RecentEvents()
        observer = Observer(hub=ProgressHub(lambda turn, event: seen.append(event)), recent=recent)
        observer.hold()
        with structlog.testing.capture_logs() as logs:
            await observer.emit(ANSWER)
            await observer.emit(TurnFinished(1, 1))
            before = (list(seen), recent.events, [e["event"] for e in logs])
            await observer.emit(CheckpointWritten(1, None))
        after = [ANSWER, TurnFinished(1, 1), CheckpointWritten(1, None)]
        assert (([], (), ["model_call", "turn_finished"]), after, tuple(after)) == (
            before,
            seen,
            recent.events,
        )

    async def test_what_is_held_is_dropped_when_the_run_exits_without_its_checkpoint(
        self,
    ) -> None:
        """The run ends before the checkpoint a held answer waited for: the answer never
        reaches the listeners (the log does not have it), the exit does."""
        observer = Observer()
        reader = observer.subscribe()
        observer.hold()
        await observer.emit(ANSWER)
        await observer.emit(RunExited(1, "lease_lost"))
        observer.close()
        assert [RunExited(1, "lease_lost")] == [event async for event in reader]

    async def test_nothing_is_held_after_the_checkpoint(self) -> None:
        """Once the checkpoint is reported, events go out as they happen again."""
        seen: list[ProgressEvent] = []
        observer = Observer(hub=ProgressHub(lambda turn, event: seen.append(event)))
        observer.hold()
        await observer.emit(CheckpointWritten(1, None))
        await observer.emit(TurnStarted(2, 1))
        assert [CheckpointWritten(1, None), TurnStarted(2, 1)] == seen


class TestTelemetry:
    def test_a_turn_span_counts_the_turn(self) -> None:
        """Each turn span is one more ``autonomous.turns``, counted inside the span."""
        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        metrics = InMemoryMetricReader()
        telemetry = Telemetry.create(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[metrics]),
        )
        observer = Observer(telemetry=telemetry)
        for turn in (1, 2):
            with observer.turn_span(turn):
                pass
        data = metrics.get_metrics_data()
        assert data is not None
        turns = [
            point.value
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "autonomous.turns"
            for point in metric.data.data_points
            if isinstance(point, NumberDataPoint)
        ]
        names = [span.name for span in spans.get_finished_spans()]
        assert ([2], ["autonomous.turn", "autonomous.turn"]) == (turns, names)


class TestLog:
    async def test_bind_adds_fields_to_every_line(self) -> None:
        """Fields bound once (session, agent) are on every event logged after."""
        observer = Observer()
        observer.bind(session="a/b/c")
        with structlog.testing.capture_logs() as logs:
            await observer.emit(Paused(4))
            await observer.emit(Resumed(4))
        assert [("paused", "a/b/c"), ("resumed", "a/b/c")] == [
            (e["event"], e["session"]) for e in logs
        ]
