"""Checkpoints: saved state of a notebook's namespace, brought back after a restart.

    manifest = save(namespace, directory, "before-training")
    report = restore(namespace, directory)          # the latest checkpoint
    print(report.summary())

Per variable: modules come back as imports, functions and classes defined in
cells as their source (run again before the data, so instances of cell
classes unpickle), everything else by value with pickle protocol 5.  What
cannot be saved is listed in the manifest with the reason.  Files are
owner-only and committed atomically; restore refuses files anyone else could
have written, because unpickling runs code.  docs/checkpoints.md has it all.

Owns: the namespace logic (`save`, `restore`, `model`, `source`, `pickling`,
`buffers`, `prepared`),
the files (`store`, `manifests`), and the kernel's glue (`settings`, `shell`,
`magics`).  May import: the standard library, traitlets and IPython (settings
and magics only), the shared pure modules.  Never the runtime, the kernel
side, the agent or the command line.
"""

from __future__ import annotations

from .errors import BadCheckpointName as BadCheckpointName
from .errors import CheckpointNotFound as CheckpointNotFound
from .errors import CheckpointStoreError as CheckpointStoreError
from .errors import CheckpointTooLarge as CheckpointTooLarge
from .errors import CheckpointWriteError as CheckpointWriteError
from .errors import CorruptCheckpoint as CorruptCheckpoint
from .errors import UntrustedCheckpoint as UntrustedCheckpoint
from .manifests import CheckpointInfo as CheckpointInfo
from .manifests import drop as drop
from .manifests import list_checkpoints as list_checkpoints
from .model import DEFAULT_NAME as DEFAULT_NAME
from .model import DEFAULT_SIZE_LIMIT as DEFAULT_SIZE_LIMIT
from .model import Manifest as Manifest
from .model import RestoreReport as RestoreReport
from .model import Skipped as Skipped
from .model import user_items as user_items
from .prepared import PreparedMemory as PreparedMemory
from .restore import prepare as prepare
from .restore import restore as restore
from .save import save as save
from .store import validate_name as validate_name

__all__ = [
    "DEFAULT_NAME",
    "DEFAULT_SIZE_LIMIT",
    "BadCheckpointName",
    "CheckpointInfo",
    "CheckpointNotFound",
    "CheckpointStoreError",
    "CheckpointTooLarge",
    "CheckpointWriteError",
    "CorruptCheckpoint",
    "Manifest",
    "PreparedMemory",
    "RestoreReport",
    "Skipped",
    "UntrustedCheckpoint",
    "drop",
    "list_checkpoints",
    "prepare",
    "restore",
    "save",
    "user_items",
    "validate_name",
]
