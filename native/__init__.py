"""The cancellation flag that native code checks.

The compiled module (`_flag`, Cython) is used when it imports; otherwise a
pure-Python stand-in with the same functions, and `available` is False.
Set CANCELKERNEL_NATIVE=0 to force the stand-in.
"""

from __future__ import annotations

import logging
import os
import typing as t
from types import ModuleType

# The flag's Python API, its names written once: the compiled module (_flag.pyx), its stub (_flag.pyi) and the
# fallback (_fallback.py) each define exactly these, with the same signatures (tests/unit/test_native_flag.py checks).
API = (
    "available",
    "begin",
    "end",
    "cancel",
    "uncancel",
    "running_gen",
    "cancel_requested",
    "raise_if_cancelled",
    "cancellable_sleep",
    "flag_address",
    "expect_sigint",
    "take_sigint_arrival",
    "sigint_seen",
    "sigint_unseen",
    "sigint_wake",
    "install_sigint_handler",
    "sigint_handler_installed",
    "open_window",
    "close_window",
    "raise_in_window",
    "start_gil_yield",
    "yield_for_readable",
    "gil_heartbeat",
    "control_acted",
    "yield_requested",
    "yield_pause",
)

_FORCE_FALLBACK = os.environ.get("CANCELKERNEL_NATIVE", "1").strip().lower() in {"0", "no", "false", "off"}


def _implementation() -> tuple[ModuleType, str | None]:
    """The module that provides the API, and why it is not the compiled one (None: it is)."""
    if _FORCE_FALLBACK:
        from . import _fallback

        return _fallback, "forced by CANCELKERNEL_NATIVE=0"
    try:
        from . import _flag
    except ImportError as exc:  # no compiler at install time, or a broken build
        from . import _fallback

        logging.getLogger("cancelkernel").warning(
            "cancelkernel.native: compiled flag not importable (%s); using the pure-Python "
            "flag. Native loops that hold the GIL cannot be interrupted. Reinstall with a C "
            "compiler to fix.",
            exc,
        )
        return _fallback, str(exc)
    return _flag, None


_module, import_error = _implementation()
globals().update({name: getattr(_module, name) for name in API})

if t.TYPE_CHECKING:
    from ._flag import *  # noqa: F403 - the stub gives the API its types


def get_include() -> str:
    """Directory holding cancelkernel_native.h (C `include_dirs`) and the .pxd tree (Cython `include_path`).

    A C extension includes "cancelkernel_native.h" and calls cancelkernel_import()
    once at module init.  Cython finds the .pxd files of a regular install on
    sys.path by itself; pass this directory as `include_path` too, so that
    `from cancelkernel.native cimport cancel_requested` also builds against an
    editable install (whose package directory is not named cancelkernel/native).
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
