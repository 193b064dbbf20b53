"""Kernel options for checkpoints, and where a kernel's checkpoints live by default."""

from __future__ import annotations

import hashlib
import os

from traitlets import Bool, Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from ..protocol import CHECKPOINT_ROOT_ENV, KERNEL_ID_ENV
from .errors import BadCheckpointName
from .model import DEFAULT_SIZE_LIMIT
from .store import validate_name

ROOT_NAME = "cancelkernel-checkpoints"


class CheckpointSettings(Configurable):
    """Checkpoint options of a kernel (`--CheckpointSettings.autosave=True` on its command line)."""

    directory = Unicode(
        "",
        help="""Directory of this kernel's checkpoints; set, it wins over `root`.  Empty
        (the default): <root>/<key>, where the key is the kernel's KERNEL_ID when its
        environment has one (Enterprise Gateway keeps it across restarts), else
        <connection file name>-<hash of its path>, which stays the same across
        restart_kernel() because jupyter_client keeps the connection file.
        Checkpoints can be as large as the namespace: point this at a disk with room
        if the runtime dir is small.""",
    ).tag(config=True)

    root = Unicode(
        help="""Directory under which each kernel keeps its checkpoints, in <root>/<key>
        (`directory` says the key).  A restarted kernel finds its checkpoints only if
        it sees this path: when kernels move between hosts (Enterprise Gateway, a new
        Kubernetes pod), put it on a filesystem every kernel host mounts (an NFS
        export, a ReadWriteMany volume; docs/checkpoints.md).  Default: the
        environment variable CANCELKERNEL_CHECKPOINT_ROOT, else
        <jupyter runtime dir>/cancelkernel-checkpoints.""",
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

    prepare_memory = Int(
        2 << 30,
        min=0,
        help="""Most bytes of memory a kernel asked to prepare a checkpoint (the
        agent client asks its warm spare, while it waits) faults in ahead for the
        checkpoint's large bytearrays, so that restoring them only copies; never
        more than half of what the kernel may still take before its memory guard
        acts.  The kernel holds that memory (its resident set counts it) until the
        restore takes it or its first cell runs.  0: none.""",
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

    @default("root")
    def _root_from_environment(self) -> str:
        return os.environ.get(CHECKPOINT_ROOT_ENV, "")

    @validate("restore_on_start")
    def _check_restore_on_start(self, proposal: dict) -> str:
        value = str(proposal["value"]).strip()
        if value in ("off", "latest"):
            return value
        try:
            return validate_name(value)
        except BadCheckpointName as exc:
            raise TraitError(
                f"CheckpointSettings.restore_on_start must be 'off', 'latest' or a checkpoint name: {exc}"
            ) from None

    def resolve_directory(self) -> str:
        """`directory` if set, else <root>/<the kernel's key> (default_directory)."""
        if self.directory:
            return os.path.abspath(os.path.expanduser(self.directory))
        return default_directory(_connection_file(self), root=self.root, kernel_id=os.environ.get(KERNEL_ID_ENV))

    def resolve_root(self) -> str | None:
        """The root the directory is under, None when `directory` names it outright."""
        return None if self.directory else root_directory(self.root)


def root_directory(root: str) -> str:
    """`root` as an absolute path; empty: <jupyter runtime dir>/cancelkernel-checkpoints."""
    if root:
        return os.path.abspath(os.path.expanduser(root))
    from jupyter_core.paths import jupyter_runtime_dir

    return os.path.join(jupyter_runtime_dir(), ROOT_NAME)


def default_directory(connection_file: str | None, *, root: str = "", kernel_id: str | None = None) -> str:
    """<root>/<kernel key>: a kernel's checkpoint directory when `directory` is not set (kernel_key says the key)."""
    return os.path.join(root_directory(root), kernel_key(connection_file, kernel_id))


def kernel_key(connection_file: str | None, kernel_id: str | None = None) -> str:
    """The name of a kernel's checkpoint directory under the root: the same for the kernel that replaces it.

    KERNEL_ID when the kernel has one (Enterprise Gateway renames the connection
    file at every start, and a restart may be on another host, but keeps the id),
    used as it is when it is a plain name and hashed when not (it must stay one
    path component); else <connection file stem>-<hash of its path>: the hash keeps
    two kernels whose connection files share a base name apart.  Without either
    (an embedded kernel) the directory is per process.
    """
    if kernel_id:
        try:
            return validate_name(kernel_id)
        except BadCheckpointName:
            return f"kernel-id-{hashlib.sha256(kernel_id.encode()).hexdigest()[:16]}"
    if connection_file:
        path = os.path.abspath(connection_file)
        stem = os.path.splitext(os.path.basename(path))[0]
        return f"{stem}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    return f"pid-{os.getpid()}"


def _connection_file(start: Configurable) -> str | None:
    """The connection file of the kernel app above `start` in the parent chain, if any."""
    node: object = start
    while node is not None:
        found = getattr(node, "abs_connection_file", None) or getattr(node, "connection_file", None)
        if isinstance(found, str) and found:
            return found
        node = getattr(node, "parent", None)
    return None  # not inside a kernel app (an embedded shell): the directory is per process
