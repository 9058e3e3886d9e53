"""Importing litellm: on first use (the import takes seconds), with its bundled catalogs.

litellm's documented switches for the catalogs it would otherwise fetch from GitHub are set
first, unless the environment already says otherwise: ``LITELLM_LOCAL_MODEL_COST_MAP=True``
(the price map, fetched at import) and ``LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True`` (fetched,
blocking, on the first Anthropic call).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import anyio.to_thread

#: litellm's documented switches to use its bundled copies instead of fetching them.
_LOCAL_CATALOG_SWITCHES = ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS")


async def import_litellm() -> Any:
    """litellm, imported on first use in a worker thread, using its bundled catalogs."""
    for switch in _LOCAL_CATALOG_SWITCHES:
        os.environ.setdefault(switch, "True")
    if "litellm" not in sys.modules:
        await anyio.to_thread.run_sync(importlib.import_module, "litellm", abandon_on_cancel=True)
    import litellm  # already loaded; waits if another thread is still loading it

    return _quiet(litellm)


def load_litellm() -> Any:
    """litellm, imported with its bundled catalogs; in async code, use :func:`import_litellm`."""
    for switch in _LOCAL_CATALOG_SWITCHES:
        os.environ.setdefault(switch, "True")
    import litellm

    return _quiet(litellm)


def _quiet(litellm: Any) -> Any:
    """``litellm`` with its debug banner off: a failed call is reported as our ModelError,
    not with litellm's "Give Feedback / Get Help" lines on stdout."""
    litellm.suppress_debug_info = True
    return litellm
