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

from .deadlines import DeadlineExceeded as DeadlineExceeded
from .deadlines import fail_after as fail_after
from .deadlines import fail_at as fail_at
from .deadlines import move_on_after as move_on_after
from .deadlines import move_on_at as move_on_at

__all__ += ["DeadlineExceeded", "fail_after", "fail_at", "move_on_after", "move_on_at"]
