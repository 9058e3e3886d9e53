"""Token and cost accounting: usage values, prices from litellm's table, a per-call tracker.

Map:
    _usage.py            Usage: token counts of model calls, added with ``+``
    _pricing.py          Pricing: USD per million tokens, ``cost(usage)``, ``Pricing.for_model``;
                         ``max_output_tokens(model)`` from the same table
    _litellm_prices.py   the lazy, network-free import of litellm's bundled price table
    _tracker.py          Tracker: one UsageRow per model call, running UsageTotals (all, by model)
    _errors.py           the error tree (UsageError at the root, UnknownModel)

Importing this package does not import litellm; the first ``Pricing.for_model`` call does.
"""

from ._errors import UnknownModel, UsageError
from ._pricing import Pricing, max_output_tokens
from ._tracker import Tracker, UsageRow, UsageTotals
from ._usage import Usage

__all__ = [
    "Pricing",
    "Tracker",
    "UnknownModel",
    "Usage",
    "UsageError",
    "UsageRow",
    "UsageTotals",
    "max_output_tokens",
]

#: Says this package is bounded-autonomous's: ``import autonomous`` refuses a package of the
#: same name from another distribution (PyPI has one) installed in its place.
__bounded_autonomous__ = True
