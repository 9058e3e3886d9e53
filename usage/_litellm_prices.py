"""The one place that imports litellm, lazily, for its bundled price table."""

from __future__ import annotations

import os
from typing import Any


def model_cost_table() -> dict[str, Any]:
    """Return ``litellm.model_cost``, importing litellm on first use without a network call.

    litellm fetches a remote price map when it is imported unless
    ``LITELLM_LOCAL_MODEL_COST_MAP`` is true, so the switch is set first (``setdefault``: a value
    the user chose is kept). The import is slow (seconds), which is why it happens here and not
    when ``usage`` is imported. If litellm was already imported elsewhere, its table is used as is.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # deliberately lazy: a slow import

    table: dict[str, Any] = litellm.model_cost
    return table
