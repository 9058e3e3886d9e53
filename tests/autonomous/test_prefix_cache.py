"""Prompt prefix caching as OpenAI bills it: the arithmetic, the cache, and the scripted server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autonomous.testing import PrefixCache, PromptUsage
from autonomous.testing._prefix_cache import (
    billable_cached_tokens,
    common_prefix_tokens,
    estimate_tokens,
    prompt_text,
)
from autonomous.testing._server import ScriptedServer, error, reply
from tests.support import litellm_model
from usage import Usage

#: A system prompt of about 1,500 estimated tokens: long enough to be cached.
SYSTEM = {"role": "system", "content": "You watch disks. " * 350}


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A chat request body for the model ``m`` with ``messages``."""
    return {"model": "m", "messages": list(messages), **extra}


def user(text: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


class TestBillableCachedTokens:
    @pytest.mark.parametrize(
        ("expected", "matched", "prompt"),
        [
            (0, 1023, 5000),  # a match below 1,024 tokens is not cached
            (0, 1023, 1023),  # nor is a prompt below 1,024
            (1024, 1024, 1024),
            (1024, 1151, 2000),  # whole 128-token blocks only
            (1152, 1152, 2000),
            (1920, 5000, 2000),  # never more than the prompt, in blocks
            (0, 0, 0),
        ],
    )
    def test_examples(self, expected: int, matched: int, prompt: int) -> None:
        """The first 1,024 tokens, then increments of 128, within the prompt."""
        assert expected == billable_cached_tokens(matched, prompt)

    @given(st.integers(0, 100_000), st.integers(0, 100_000))
    def test_whole_blocks_within_match_and_prompt(self, matched: int, prompt: int) -> None:
        """Cached tokens are whole blocks, never above the match or the prompt, less than a
        block below their minimum once both reach 1,024."""
        cached = billable_cached_tokens(matched, prompt)
        assert cached % 128 == 0
        assert cached <= min(matched, prompt)
        if min(matched, prompt) >= 1024:
            assert min(matched, prompt) - cached < 128
        else:
            assert cached == 0

    def test_negative_counts_are_refused(self) -> None:
        """A negative count is a caller's bug, named in the error."""
        with pytest.raises(ValueError, match="-1"):
            billable_cached_tokens(-1, 10)


class TestEstimates:
    def test_four_characters_a_token_rounded_up(self) -> None:
        """A token per four characters; a partial token counts."""
        assert (0, 1, 1, 2) == tuple(estimate_tokens("x" * n) for n in (0, 1, 4, 5))

    def test_common_prefix_in_whole_tokens(self) -> None:
        """Only whole shared tokens count."""
        assert 2 == common_prefix_tokens("abcdefghij", "abcdefghXj")
        assert 1 == common_prefix_tokens("abcdefghi", "abcdefgXi")
        assert 0 == common_prefix_tokens("", "abc")

    def test_tools_come_before_messages(self) -> None:
        """The tools lead the prompt, so a changed tool spec changes everything after it."""
        text = prompt_text(body(user("hi"), tools=[{"type": "function"}]))
        assert text.index('"function"') < text.index('"hi"')

    def test_key_order_is_kept(self) -> None:
        """A reordered message is a changed prefix (stricter than a provider, never looser)."""
        a = prompt_text(body({"role": "user", "content": "x"}))
        b = prompt_text(body({"content": "x", "role": "user"}))
        assert a != b


class TestPrefixCache:
    def test_first_request_has_nothing_cached(self) -> None:
        """A prompt never seen is billed in full."""
        usage = PrefixCache().observe(body(SYSTEM, user("hi")))
        assert usage == PromptUsage(estimate_tokens(prompt_text(body(SYSTEM, user("hi")))), 0)

    def test_a_grown_conversation_reads_the_earlier_prompt(self) -> None:
        """The next turn's prompt finds the earlier one's whole blocks."""
        cache = PrefixCache()
        first = body(SYSTEM, user("hi"))
        cache.observe(first)
        second = cache.observe(body(SYSTEM, user("hi"), {"role": "assistant", "content": "ok"}))
        assert second.cached_tokens == estimate_tokens(prompt_text(first)) // 128 * 128
        assert second.cached_tokens >= 1024

    def test_a_short_prompt_is_never_cached(self) -> None:
        """Below 1,024 tokens nothing is cached, however often it repeats."""
        cache = PrefixCache()
        cache.observe(body(user("hi")))
        assert 0 == cache.observe(body(user("hi"))).cached_tokens

    def test_a_changed_tool_spec_misses(self) -> None:
        """Tools lead the prompt: changing one loses the whole cached prefix."""
        cache = PrefixCache()
        cache.observe(body(SYSTEM, tools=[{"name": "a"}]))
        assert 0 == cache.observe(body(SYSTEM, tools=[{"name": "b"}])).cached_tokens

    @pytest.mark.parametrize(
        ("first", "second", "shared"),
        [
            ({"user": "a"}, {"user": "a"}, True),
            ({"user": "a"}, {"user": "b"}, False),
            ({"prompt_cache_key": "k", "user": "a"}, {"prompt_cache_key": "k", "user": "b"}, True),
            ({"model": "m"}, {"model": "n"}, False),
            ({}, {}, True),
        ],
    )
    def test_sessions(self, first: dict[str, Any], second: dict[str, Any], shared: bool) -> None:
        """A session is the model with the prompt_cache_key, else the user; none shares one."""
        cache = PrefixCache()
        cache.observe({**body(SYSTEM), **first})
        cached = cache.observe({**body(SYSTEM), **second}).cached_tokens
        assert shared == (cached > 0)

    def test_clear_forgets(self) -> None:
        """A cleared cache bills the next prompt in full."""
        cache = PrefixCache()
        cache.observe(body(SYSTEM))
        cache.clear()
        assert 0 == cache.observe(body(SYSTEM)).cached_tokens

    @given(
        st.lists(
            st.lists(st.sampled_from(["a" * 700, "b" * 1500, "c" * 2100, "d" * 513]), max_size=8),
            min_size=1,
            max_size=6,
        )
    )
    def test_matches_the_longest_common_prefix_with_any_earlier_prompt(
        self, requests: list[list[str]]
    ) -> None:
        """Each prompt is billed the longest prefix, in whole tokens, it shares with any earlier
        prompt of the session, rounded as OpenAI rounds."""
        cache = PrefixCache()
        earlier: list[str] = []
        for contents in requests:
            request = body(*(user(c) for c in contents))
            text = prompt_text(request)
            matched = max((common_prefix_tokens(e, text) for e in earlier), default=0)
            expected = PromptUsage(
                estimate_tokens(text), billable_cached_tokens(matched, estimate_tokens(text))
            )
            assert expected == cache.observe(request)
            earlier.append(text)


@pytest.mark.anyio
class TestScriptedServer:
    async def test_usage_comes_from_the_request(self) -> None:
        """With prefix_cache, litellm reads the estimated prompt and the cached prefix; the
        scripted output tokens stay."""
        messages = [SYSTEM, user("How full is the disk?")]
        with ScriptedServer(reply("a", output_tokens=7), reply("b"), prefix_cache=True) as srv:
            model = litellm_model(srv)
            first = await model.complete(messages, [])
            second = await model.complete([*messages, {"role": "assistant", "content": "a"}], [])
            billed = srv.prompt_usage
        prompt = estimate_tokens(prompt_text(srv.requests[0]))
        assert billed[0] == PromptUsage(prompt, 0)
        assert first.usage == Usage(prompt, 7, 0)
        assert billed[1].cached_tokens == prompt // 128 * 128
        assert second.usage.cached_input_tokens == billed[1].cached_tokens
        assert second.usage.input_tokens == billed[1].prompt_tokens

    async def test_streamed_usage_is_billed_too(self) -> None:
        """A streamed answer reports the same simulated usage."""
        with ScriptedServer(reply("a"), reply("b"), prefix_cache=True) as srv:
            model = litellm_model(srv, stream=True)
            await model.complete([SYSTEM, user("hi")], [])
            second = await model.complete([SYSTEM, user("hi"), user("again")], [])
            assert second.usage.cached_input_tokens == srv.prompt_usage[1].cached_tokens > 0

    async def test_without_it_the_scripted_usage_stays(self) -> None:
        """Off by default: the step's own token counts are reported, nothing is billed."""
        with ScriptedServer(reply("a", input_tokens=3, cached_tokens=1)) as srv:
            response = await litellm_model(srv).complete([SYSTEM], [])
            assert (response.usage, srv.prompt_usage) == (Usage(3, 5, 1), [])

    async def test_an_error_is_not_billed(self) -> None:
        """A request answered with an error fills no cache and bills nothing."""
        with ScriptedServer(error(400, "no"), reply("a"), prefix_cache=True) as srv:
            model = litellm_model(srv, num_retries=0)
            with pytest.raises(Exception, match="no"):
                await model.complete([SYSTEM], [])
            response = await model.complete([SYSTEM], [])
            assert (len(srv.prompt_usage), response.usage.cached_input_tokens) == (1, 0)

    def test_reset_forgets_the_cache(self) -> None:
        """reset() clears what was billed and what the cache holds."""
        cache = PrefixCache()
        cache.observe(body(SYSTEM))
        srv = ScriptedServer(prefix_cache=cache)
        srv.reset()
        assert 0 == cache.observe(body(SYSTEM)).cached_tokens

    def test_a_bad_option_is_refused(self) -> None:
        """prefix_cache takes a bool or a PrefixCache, and says so."""
        with pytest.raises(TypeError, match="prefix_cache"):
            ScriptedServer(prefix_cache="yes")  # type: ignore[arg-type]
