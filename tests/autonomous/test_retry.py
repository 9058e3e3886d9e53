"""autonomous.retry: the transient-error policy, its waits on the run's clock, and over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autonomous import (
    Agent,
    ModelCallLimit,
    ModelError,
    RetryDecision,
    StopReason,
    TurnTimeout,
    run_autonomous,
    start_autonomous,
)
from autonomous._models._litellm import _model_error
from autonomous.retry import (
    RetryPolicy,
    TransientRetry,
    as_policy,
    is_transient,
    parse_retry_after,
    transient,
)
from autonomous.testing import FakeClock, ScriptedModel, done
from autonomous.testing import reply as model_reply
from autonomous.testing._server import ScriptedServer, call, error, reply

from ..support.litellm_http import wait_until
from .helpers import builder
from .test_http_runs import http_build

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def status_error(status: int, retry_after: float | None = None) -> ModelError:
    """A ModelError as the litellm model raises it for an HTTP answer."""
    return ModelError(f"HTTP {status}", status=status, retry_after=retry_after)


class TestIsTransient:
    """Which errors are worth another try."""

    @pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529])
    def test_rate_limits_and_server_errors_are_transient(self, status: int) -> None:
        """429, 408 and every 5xx are transient."""
        assert is_transient(status_error(status))

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
    def test_client_errors_are_permanent(self, status: int) -> None:
        """401, 400, 404 and the other client errors are not."""
        assert not is_transient(status_error(status))

    def test_timeouts_and_dropped_connections_are_transient(self) -> None:
        """A turn timeout, and a model error caused by a timeout or a connection error."""
        for cause in (TimeoutError("slow"), ConnectionResetError("gone")):
            wrapped = ModelError("failed")
            wrapped.__cause__ = cause
            assert is_transient(wrapped)
        assert is_transient(TurnTimeout("turn 1 ran past per_turn_timeout=5 s"))

    def test_other_errors_are_permanent(self) -> None:
        """A model error with no status and no transient cause, a bug, a call limit."""
        assert not is_transient(ModelError("the response has no choices"))
        assert not is_transient(ValueError("bug"))
        assert not is_transient(ModelCallLimit("too many calls"))


class TestTransientPolicy:
    """TransientRetry's decisions and delays."""

    def test_the_defaults(self) -> None:
        """Five retries, backoff from 1 s doubling to 60 s, with jitter."""
        assert TransientRetry(5, 1.0, 60.0, True, 300.0) == transient()

    @given(st.integers(min_value=0, max_value=20), st.integers(min_value=1, max_value=30))
    def test_transient_errors_are_retried_attempts_times(self, attempts: int, attempt: int) -> None:
        """RETRY_TURN while attempt <= attempts, then ABORT_RUN."""
        expected = RetryDecision.RETRY_TURN if attempt <= attempts else RetryDecision.ABORT_RUN
        assert expected == transient(attempts=attempts)(status_error(429), attempt)

    @given(st.integers(min_value=1, max_value=30))
    def test_permanent_errors_are_never_retried(self, attempt: int) -> None:
        """A 401 ends the run at the first failure."""
        assert RetryDecision.ABORT_RUN == transient()(status_error(401), attempt)

    @given(
        attempt=st.integers(min_value=1, max_value=200),
        base=st.floats(min_value=0, max_value=100),
        cap=st.floats(min_value=0, max_value=1000),
        draw=st.floats(min_value=0, max_value=1, exclude_max=True),
    )
    def test_full_jitter_stays_between_zero_and_the_capped_backoff(
        self, attempt: int, base: float, cap: float, draw: float
    ) -> None:
        """The wait is a draw from [0, min(cap, base * 2**(attempt-1))]."""
        policy = TransientRetry(base=base, cap=cap, rand=lambda: draw)
        most = min(cap, base * 2.0 ** min(attempt - 1, 64))
        assert 0 <= policy.delay(status_error(503), attempt) <= most
        assert policy.delay(status_error(503), attempt) == pytest.approx(most * draw)

    def test_without_jitter_the_backoff_doubles_up_to_the_cap(self) -> None:
        """1, 2, 4, 8 ... seconds, held to cap."""
        policy = transient(base=1, cap=10, jitter=False)
        assert [1, 2, 4, 8, 10, 10] == [policy.delay(status_error(500), n) for n in range(1, 7)]

    @given(st.floats(min_value=0, max_value=10_000))
    def test_retry_after_replaces_the_backoff_up_to_its_cap(self, after: float) -> None:
        """A provider's Retry-After is the wait, held to max_retry_after."""
        policy = transient(cap=1, max_retry_after=120)
        assert min(after, 120) == policy.delay(status_error(429, after), 1)

    def test_bad_settings_are_refused(self) -> None:
        """Negative attempts or seconds are a ValueError naming the setting."""
        with pytest.raises(ValueError, match="attempts"):
            transient(attempts=-1)
        with pytest.raises(ValueError, match="cap"):
            transient(cap=float("nan"))


class TestParseRetryAfter:
    """Retry-After headers: delta-seconds and HTTP-dates."""

    @given(st.integers(min_value=0, max_value=10**6))
    def test_delta_seconds(self, seconds: int) -> None:
        """A number of seconds is that many seconds."""
        assert float(seconds) == parse_retry_after(f" {seconds} ", NOW)

    @given(st.integers(min_value=-86400, max_value=86400))
    def test_an_http_date_is_the_time_until_it(self, offset: int) -> None:
        """An HTTP-date gives the seconds from now until it; a past one, 0."""
        header = format_datetime(NOW + timedelta(seconds=offset), usegmt=True)
        assert max(offset, 0) == parse_retry_after(header, NOW)

    @pytest.mark.parametrize("header", ["", "soon", "nan", "inf", "Mon, 99 Foo 2030"])
    def test_anything_else_is_none(self, header: str) -> None:
        """A header that is neither gives None (the backoff applies)."""
        assert parse_retry_after(header, NOW) is None


pytestmark = pytest.mark.anyio


class TestRetryWaitsInRuns:
    """The loop waits the policy's delay on the run's clock, within the run's budgets."""

    async def test_a_retry_waits_the_delay_on_the_runs_clock(self) -> None:
        """A 429 asking for 30 s: the retry starts 30 fake seconds later and completes."""
        clock = FakeClock(autojump=True)
        model = ScriptedModel([status_error(429, 30), done(), model_reply("ok")])
        result = await run_autonomous(builder(model), "go", clock=clock, retry_policy=transient())
        assert StopReason.COMPLETED == result.reason
        assert 30 <= clock.monotonic() < 31
        assert 3 == model.requests

    async def test_the_wait_is_held_to_the_wallclock_budget(self) -> None:
        """Waiting 100 s with 10 s of budget left ends the run at the budget, not later."""
        clock = FakeClock(autojump=True)
        model = ScriptedModel([status_error(429, 100), done()])
        result = await run_autonomous(
            builder(model), "go", clock=clock, retry_policy=transient(), max_wallclock=10
        )
        assert StopReason.WALLCLOCK_EXCEEDED == result.reason
        assert 10 <= clock.monotonic() < 11
        assert 1 == model.requests

    async def test_stop_ends_the_wait(self) -> None:
        """A stop during the backoff ends the run at once, without the retry."""
        clock = FakeClock()
        model = ScriptedModel([status_error(503, 3600), done()])
        async with start_autonomous(
            builder(model), "go", clock=clock, retry_policy=transient()
        ) as handle:
            await handle.ready()
            await wait_until(lambda: model.requests == 1 and clock.sleepers >= 1)
            with anyio.fail_after(5):
                await handle.stop()
        result = await handle.wait()
        assert StopReason.CONTEXT_CANCELLED == result.reason
        assert (1, 0.0) == (model.requests, clock.monotonic())

    async def test_a_plain_policy_retries_at_once(self) -> None:
        """A policy without delay() retries with no wait at all (as before)."""
        clock = FakeClock(autojump=True)
        model = ScriptedModel([status_error(500), done(), model_reply("ok")])
        result = await run_autonomous(
            builder(model),
            "go",
            clock=clock,
            retry_policy=lambda error, attempt: RetryDecision.RETRY_TURN,
        )
        assert (StopReason.COMPLETED, 0.0) == (result.reason, clock.monotonic())


class TestRetryPolicyProtocol:
    """RetryPolicy: a decision and a delay; a plain function is one that never waits."""

    def test_transient_is_a_retry_policy(self) -> None:
        """The library's own policy has both members, and stays itself."""
        policy = transient()
        assert isinstance(policy, RetryPolicy) and as_policy(policy) is policy

    def test_a_plain_function_decides_and_never_waits(self) -> None:
        """``as_policy(fn)``: fn's decision, a delay of 0 whatever the error."""
        seen: list[tuple[str, int]] = []

        def decide(error: BaseException, attempt: int) -> RetryDecision:
            seen.append((str(error), attempt))
            return RetryDecision.SKIP_TURN

        policy = as_policy(decide)
        assert isinstance(policy, RetryPolicy)
        assert (RetryDecision.SKIP_TURN, [("boom", 2)]) == (policy(ValueError("boom"), 2), seen)
        assert 0.0 == policy.delay(status_error(429, 30), 1)

    async def test_a_policy_of_ones_own_with_a_delay_waits_it(self) -> None:
        """A class of the user's with ``__call__`` and ``delay``: the run waits its delay."""

        class EverySeven:
            def __call__(self, error: BaseException, attempt: int) -> RetryDecision:
                return RetryDecision.RETRY_TURN

            def delay(self, error: BaseException, attempt: int) -> float:
                return 7.0 * attempt

        clock = FakeClock(autojump=True)
        model = ScriptedModel([status_error(500), status_error(500), done(), model_reply("ok")])
        result = await run_autonomous(builder(model), "go", clock=clock, retry_policy=EverySeven())
        assert (StopReason.COMPLETED, 21.0) == (result.reason, clock.monotonic())


class TestOverHttp:
    """Statuses and Retry-After travel from the server through litellm into ModelError."""

    async def test_a_429_carries_its_status_and_retry_after(
        self, scripted_server: ScriptedServer
    ) -> None:
        """The ModelError of a 429 says 429 and the Retry-After seconds; the retry completes."""
        scripted_server.push(
            error(429, "slow down", retry_after=7), call("report_done", {"state": "done"}),
            reply("ok"),
        )  # fmt: skip
        seen: list[BaseException] = []
        policy = transient()

        def recording(exc: BaseException, attempt: int) -> RetryDecision:
            seen.append(exc)
            return policy(exc, attempt)

        clock = FakeClock(autojump=True)
        result = await run_autonomous(
            http_build(scripted_server), "go", retry_policy=recording, clock=clock
        )
        assert StopReason.COMPLETED == result.reason
        assert isinstance(seen[0], ModelError)
        assert (429, 7.0) == (seen[0].status, seen[0].retry_after)

    async def test_an_http_date_retry_after_is_read(self, scripted_server: ScriptedServer) -> None:
        """A Retry-After date an hour ahead is about 3600 seconds."""
        ahead = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
        scripted_server.push(error(503, "busy", retry_after=ahead))
        result = await run_autonomous(http_build(scripted_server), "go")
        assert isinstance(result.error, ModelError) and result.error.retry_after is not None
        assert 3500 < result.error.retry_after <= 3600

    async def test_a_401_ends_the_run_at_once(self, scripted_server: ScriptedServer) -> None:
        """A permanent error is not retried: one request, retry_policy_aborted."""
        scripted_server.push(error(401, "bad key"))
        result = await run_autonomous(
            http_build(scripted_server), "go", retry_policy=transient(), clock=FakeClock()
        )
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert isinstance(result.error, ModelError) and 401 == result.error.status
        assert 1 == scripted_server.request_count


class ProviderError(Exception):
    """Stands in for a litellm exception: a status code and the response headers."""

    def __init__(self, message: str, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.litellm_response_headers = headers


class TestModelErrorMapping:
    """The litellm model's ModelError: status and Retry-After from the provider's exception."""

    def test_retry_after_ms_wins_over_retry_after(self) -> None:
        """retry-after-ms is read in milliseconds, before a coarser retry-after."""
        exc = ProviderError("slow", 429, {"retry-after-ms": "1500", "retry-after": "2"})
        made = _model_error("openai/x", exc)
        assert (429, 1.5) == (made.status, made.retry_after)

    def test_no_header_no_retry_after(self) -> None:
        """Without the headers retry_after is None; the status is kept."""
        made = _model_error("openai/x", ProviderError("down", 503, {}))
        assert (503, None) == (made.status, made.retry_after)

    def test_a_buried_cause_has_no_status(self) -> None:
        """litellm labels a too-deep response HTTP 500; no server said so: not transient."""
        made = _model_error("openai/x", ProviderError("RecursionError: deep", 500, {}))
        assert made.status is None and not is_transient(made)


class TestNoCredentials:
    """A provider SDK that refuses the call before sending it (no API key)."""

    async def test_missing_credentials_are_permanent_and_said_in_one_line(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """litellm relabels the SDK's "missing credentials" as HTTP 500; no server answered,
        so it is not retried and the message says what is missing, without the HTTP 500."""
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never the internet
        result = await run_autonomous(
            lambda extra: Agent("openai/gpt-4o-mini", tools=[*extra]),
            "go",
            retry_policy=transient(),
            clock=FakeClock(),
        )
        error = result.error
        assert StopReason.RETRY_POLICY_ABORTED == result.reason
        assert isinstance(error, ModelError) and error.status is None and not is_transient(error)
        assert "OPENAI_API_KEY" in str(error) and "HTTP 500" not in str(error)
        assert "\n" not in str(error)
        assert 1 == result.turns
