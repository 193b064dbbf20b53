"""Kernel options for checkpoints, and where a kernel's checkpoints live by default."""

from __future__ import annotations

import hashlib
import os

from traitlets import Bool, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from .errors import BadCheckpointName
from .model import DEFAULT_SIZE_LIMIT
from .store import validate_name

ROOT_NAME = "cancelkernel-checkpoints"


class CheckpointSettings(Configurable):
    """Checkpoint options of a kernel (`--CheckpointSettings.autosave=True` on its command line)."""

    directory = Unicode(
        "",
        help="""Directory of this kernel's checkpoints.  Empty (the default):
        <jupyter runtime dir>/cancelkernel-checkpoints/<connection file name>, which
        stays the same across restart_kernel() because jupyter_client keeps the
        connection file.  Checkpoints can be as large as the namespace: point this
        at a disk with room if the runtime dir is small.""",
    ).tag(config=True)

    autosave = Bool(
        False,
        help="""Save checkpoint 'autosave' after each cell that succeeds, when the
        namespace pickles to at most autosave_limit bytes (a larger one is skipped
        quietly).  The save runs between cells and cannot be interrupted, so keep
        the limit small.""",
    ).tag(config=True)

    autosave_limit = Int(
        100_000_000,
        min=0,
        help="Largest namespace, in pickled bytes, that autosave saves; past it the autosave is abandoned.",
    ).tag(config=True)

    size_limit = Int(
        DEFAULT_SIZE_LIMIT,
        min=1,
        help="""Largest single variable, in pickled bytes, that a checkpoint holds;
        a larger one is left out and listed in the manifest with the reason.""",
    ).tag(config=True)

    restore_on_start = Unicode(
        "off",
        help="""What a (re)started kernel restores before its first cell: 'off' (the
        default), 'latest' (the latest checkpoint in `directory`), or a checkpoint
        NAME.  With the default directory a kernel restarted by Jupyter
        (restart_kernel(), JupyterLab's restart button) keeps its connection file,
        so it finds the checkpoints of the kernel it replaces.  The first cell's
        output says what was restored and what was not; nothing is said when there
        is no checkpoint yet.""",
    ).tag(config=True)

    @validate("restore_on_start")
    def _check_restore_on_start(self, proposal: dict) -> str:
        value = str(proposal["value"]).strip()
        if value in ("off", "latest"):
            return value
        try:
            return validate_name(value)
        except BadCheckpointName as exc:
            raise TraitError(f"CheckpointSettings.restore_on_start must be 'off', 'latest' or a checkpoint name: {exc}") from None

    def resolve_directory(self) -> str:
        """`directory` if set, else the per-kernel default derived from the connection file."""
        if self.directory:
            return os.path.abspath(os.path.expanduser(self.directory))
        return default_directory(_connection_file(self))


def default_directory(connection_file: str | None) -> str:
    """<runtime dir>/cancelkernel-checkpoints/<connection file stem>-<hash of its path>.

    The hash keeps two kernels whose connection files share a base name apart;
    without a connection file (an embedded kernel) the directory is per process.
    """
    from jupyter_core.paths import jupyter_runtime_dir

    if connection_file:
        path = os.path.abspath(connection_file)
        stem = os.path.splitext(os.path.basename(path))[0]
        key = f"{stem}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    else:
        key = f"pid-{os.getpid()}"
    return os.path.join(jupyter_runtime_dir(), ROOT_NAME, key)


def _connection_file(start: Configurable) -> str | None:
    """The connection file of the kernel app above `start` in the parent chain, if any."""
    node: object = start
    while node is not None:
        found = getattr(node, "abs_connection_file", None) or getattr(node, "connection_file", None)
        if isinstance(found, str) and found:
            return found
        node = getattr(node, "parent", None)
    return None  # not inside a kernel app (an embedded shell): the directory is per process
