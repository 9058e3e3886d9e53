"""Text at the edges: what a model or a tool hands us is made encodable before anyone keeps it.

A lone surrogate (``"\\ud800"``, from a provider's ``\\ud800`` JSON escape or a tool's bad
decoding) is a valid Python str but not UTF-8: once it is in the conversation every later
request fails to encode and the event log cannot store it. It is replaced with U+FFFD where the
text enters (a model answer, a tool result), and a warning says so, without the content.
"""

from __future__ import annotations

import re
from typing import Literal

from ._logging import get_logger

_log = get_logger("autonomous")

#: A lone surrogate: the only code points a Python str holds that UTF-8 cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Where text came from, as the ``text_cleaned`` warning names it.
Where = Literal["model_answer", "tool_result"]


def clean_text(text: str) -> tuple[str, bool]:
    """``text`` with every character UTF-8 cannot encode (lone surrogates) replaced by U+FFFD,
    and whether anything was replaced."""
    if text.isascii():  # the common case, and the cheapest check
        return text, False
    fixed, count = _SURROGATE.subn("\ufffd", text)
    return fixed, count > 0


def cleaned(text: str, where: Where, field: str) -> str:
    """``text`` cleaned by :func:`clean_text`; logs ``text_cleaned`` (no content) if it was."""
    fixed, changed = clean_text(text)
    if changed:
        _log.warning("text_cleaned", where=where, field=field, replaced="lone surrogates")
    return fixed
