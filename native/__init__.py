"""The cancellation flag that native code checks.

The compiled module (`_flag`, Cython) is used when it imports; otherwise a
pure-Python stand-in with the same functions, and `available` is False.
Set CANCELKERNEL_NATIVE=0 to force the stand-in.
"""

from __future__ import annotations

import logging
import os

_FORCE_FALLBACK = os.environ.get("CANCELKERNEL_NATIVE", "1").strip().lower() in {"0", "no", "false", "off"}

import_error: str | None
if _FORCE_FALLBACK:
    from ._fallback import *  # noqa: F403
    import_error = "forced by CANCELKERNEL_NATIVE=0"
else:
    try:
        from ._flag import *  # noqa: F403
        import_error = None
    except ImportError as exc:  # no compiler at install time, or a broken build
        from ._fallback import *  # noqa: F403

        import_error = str(exc)
        logging.getLogger("cancelkernel").warning(
            "cancelkernel.native: compiled flag not importable (%s); using the pure-Python "
            "flag. Native loops that hold the GIL cannot be interrupted. Reinstall with a C "
            "compiler to fix.",
            exc,
        )


def get_include() -> str:
    """Directory holding cancelkernel_native.h (C `include_dirs`) and the .pxd tree (Cython `include_path`).

    A C extension includes "cancelkernel_native.h" and calls cancelkernel_import()
    once at module init.  Cython finds the .pxd files of a regular install on
    sys.path by itself; pass this directory as `include_path` too, so that
    `from cancelkernel.native cimport cancel_requested` also builds against an
    editable install (whose package directory is not named cancelkernel/native).
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
