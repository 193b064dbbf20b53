"""cancelkernel: a Jupyter kernel for Python whose cells can always be stopped.

From a cell: `cancel_requested()` / `raise_if_cancelled()` are cancel points
for loops that want to cooperate (the same flag native code checks).
"""

from __future__ import annotations

__version__ = "0.1.0"

from .native import cancel_requested as cancel_requested
from .native import cancellable_sleep as cancellable_sleep
from .native import raise_if_cancelled as raise_if_cancelled

__all__ = ["__version__", "cancel_requested", "cancellable_sleep", "raise_if_cancelled"]
