"""Pricing.for_model: litellm's bundled price table, without a network call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import usage._litellm_prices
from usage import Pricing, UnknownModel, UsageError

REPO = Path(__file__).resolve().parents[2]


def fake_table(monkeypatch: pytest.MonkeyPatch, table: dict[str, Any]) -> None:
    """Make for_model read ``table`` instead of litellm's."""
    monkeypatch.setattr(usage._litellm_prices, "model_cost_table", lambda: table)


class TestForModelWithLitellm:
    """for_model against the price table that ships with litellm."""

    @pytest.mark.parametrize("name", ["gpt-4o-mini", "openai/gpt-4o-mini"])
    def test_known_model_has_positive_prices(self, name: str) -> None:
        """gpt-4o-mini, with or without its provider prefix, has positive prices."""
        pricing = Pricing.for_model(name)
        assert (True, True, True) == (
            pricing.input_per_mtok > 0,
            pricing.output_per_mtok > 0,
            pricing.cached_input_per_mtok > 0,
        )

    def test_an_anthropic_model_has_a_cache_write_price(self) -> None:
        """Claude models list a cache-write rate above their input rate."""
        pricing = Pricing.for_model("anthropic/claude-sonnet-4-5")
        assert pricing.cache_creation_input_per_mtok > pricing.input_per_mtok > 0

    def test_prefix_and_bare_name_agree(self) -> None:
        """The prefixed name finds the same entry as the bare name."""
        assert Pricing.for_model("gpt-4o-mini") == Pricing.for_model("openai/gpt-4o-mini")

    def test_unknown_model_raises(self) -> None:
        """A model litellm does not list raises UnknownModel naming it."""
        with pytest.raises(UnknownModel, match="no-such-model-xyz") as caught:
            Pricing.for_model("acme/no-such-model-xyz")
        assert "acme/no-such-model-xyz" == caught.value.model

    def test_unknown_model_is_a_usage_and_lookup_error(self) -> None:
        """UnknownModel can be caught as UsageError or as LookupError."""
        assert issubclass(UnknownModel, UsageError)
        assert issubclass(UnknownModel, LookupError)

    def test_local_price_map_switch_is_set(self) -> None:
        """Reading the table leaves litellm's local price map switch on."""
        Pricing.for_model("gpt-4o-mini")
        assert "true" == os.environ["LITELLM_LOCAL_MODEL_COST_MAP"].lower()

    def test_import_is_lazy_and_offline(self) -> None:
        """Importing usage does not import litellm; for_model then imports it without fetching."""
        code = (
            "import sys, usage, permissions\n"
            "assert 'litellm' not in sys.modules, 'litellm imported eagerly'\n"
            "print(usage.Pricing.for_model('gpt-4o-mini'))\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert 0 == done.returncode, done.stderr
        assert "fetch" not in done.stderr.lower(), done.stderr


class TestForModelTable:
    """for_model's reading of table entries, on a table the test controls."""

    def test_per_token_prices_become_per_million(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Per-token fields are multiplied by one million."""
        fake_table(
            monkeypatch,
            {
                "m": {
                    "input_cost_per_token": 1e-6,
                    "output_cost_per_token": 2e-6,
                    "cache_read_input_token_cost": 5e-7,
                    "cache_creation_input_token_cost": 1.25e-6,
                }
            },
        )
        assert Pricing(1.0, 2.0, 0.5, 1.25) == Pricing.for_model("m")

    def test_full_name_wins_over_bare_name(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """When both the prefixed and the bare name are listed, the prefixed entry is used."""
        fake_table(
            monkeypatch,
            {"p/m": {"input_cost_per_token": 3e-6}, "m": {"input_cost_per_token": 1e-6}},
        )
        assert 3.0 == Pricing.for_model("p/m").input_per_mtok

    def test_only_the_first_prefix_is_stripped(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """'a/b/m' falls back to 'b/m', not to 'm'."""
        fake_table(monkeypatch, {"b/m": {"input_cost_per_token": 1e-6}, "m": {}})
        assert 1.0 == Pricing.for_model("a/b/m").input_per_mtok

    def test_missing_cached_price_is_zero(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An entry without a cache price gets 0, so cached tokens cost the input price."""
        fake_table(monkeypatch, {"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 0}})
        assert Pricing(1.0, 0.0, 0.0) == Pricing.for_model("m")

    def test_entry_without_token_prices_is_unknown(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An entry with neither input nor output price raises UnknownModel."""
        fake_table(monkeypatch, {"m": {"output_cost_per_image": 0.04}})
        with pytest.raises(UnknownModel, match="no per-token prices"):
            Pricing.for_model("m")

    @pytest.mark.parametrize("bad", ["0.1", -1e-6, float("nan"), True])
    def test_invalid_price_is_unknown(self, monkeypatch: pytest.MonkeyPatch, bad: object) -> None:
        """A non-numeric, negative or NaN price in the table raises UnknownModel."""
        fake_table(monkeypatch, {"m": {"input_cost_per_token": bad}})
        with pytest.raises(UnknownModel, match="input_cost_per_token"):
            Pricing.for_model("m")

    @pytest.mark.parametrize("name", ["", "/", "sample_spec/"])
    def test_blank_names_are_unknown(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        """Blank names and names with an empty part after the prefix are unknown."""
        fake_table(monkeypatch, {"": {"input_cost_per_token": 1e-6}})
        with pytest.raises(UnknownModel):
            Pricing.for_model(name)

    def test_non_mapping_entry_is_unknown(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A table entry that is not a mapping is treated as absent."""
        fake_table(monkeypatch, {"m": "oops"})
        with pytest.raises(UnknownModel):
            Pricing.for_model("m")
