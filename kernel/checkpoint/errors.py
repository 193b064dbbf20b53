"""The errors of checkpoints: each says what happened and what to do next."""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint could not be saved, restored, listed or dropped; the message says why and what to do."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback through the checkpoint machinery.
        return [f"{type(self).__name__}: {self}"]


class BadCheckpointName(CheckpointError, ValueError):
    """The checkpoint name is not usable as a directory name."""


class CheckpointNotFound(CheckpointError, LookupError):
    """No checkpoint of that name (or none at all) in the directory."""


class UntrustedCheckpoint(CheckpointError, PermissionError):
    """Refused: a checkpoint file or directory someone else owns or may have changed."""


class CheckpointWriteError(CheckpointError, OSError):
    """Writing the checkpoint failed (disk full, permissions); the previous one is intact."""


class CheckpointTooLarge(CheckpointError):
    """The namespace is over the size allowed for this save (autosave limit)."""


class CorruptCheckpoint(CheckpointError):
    """The manifest of a checkpoint cannot be read."""
