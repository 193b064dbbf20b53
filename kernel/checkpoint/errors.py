"""The errors of checkpoints: each says what happened and what to do next."""

from __future__ import annotations


class CheckpointStoreError(Exception):
    """A checkpoint could not be saved, restored, listed or dropped; the message says why and what to do."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback through the checkpoint machinery.
        return [f"{type(self).__name__}: {self}"]


class BadCheckpointName(CheckpointStoreError, ValueError):
    """The checkpoint name is not usable as a directory name."""


class CheckpointNotFound(CheckpointStoreError, LookupError):
    """No checkpoint of that name (or none at all) in the directory."""


class UntrustedCheckpoint(CheckpointStoreError, PermissionError):
    """Refused: a checkpoint file or directory someone else owns or may have changed."""


class CheckpointWriteError(CheckpointStoreError, OSError):
    """Writing the checkpoint failed (disk full, permissions); the previous one is intact."""


class CheckpointTooLarge(CheckpointStoreError):
    """The namespace is over the size allowed for this save (autosave limit)."""


class CorruptCheckpoint(CheckpointStoreError):
    """The manifest of a checkpoint cannot be read."""
