"""`%checkpoint save|restore|list|drop`: checkpoints from a cell (imports IPython)."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .shell import ShellCheckpoints, format_list

USAGE = """\
%checkpoint save [NAME]      save the namespace as checkpoint NAME (default 'default')
%checkpoint restore [NAME]   bring checkpoint NAME back (default: the latest one)
%checkpoint list             list the checkpoints, the latest marked with *
%checkpoint drop NAME        delete checkpoint NAME"""


@magics_class
class CheckpointMagics(Magics):
    """The %checkpoint line magic."""

    def __init__(self, shell: Any, checkpoints: ShellCheckpoints):
        super().__init__(shell)
        self.checkpoints = checkpoints

    @line_magic
    def checkpoint(self, line: str) -> None:
        """Save, restore, list or drop checkpoints of the user namespace.

        %checkpoint save [NAME]      save the namespace as checkpoint NAME (default 'default')
        %checkpoint restore [NAME]   bring checkpoint NAME back (default: the latest one)
        %checkpoint list             list the checkpoints, the latest marked with *
        %checkpoint drop NAME        delete checkpoint NAME

        Modules come back as imports, functions and classes defined in cells as
        their source, everything else by value (pickle); what cannot be saved is
        listed with the reason.
        """
        words = line.split()
        if not words:
            raise UsageError(f"%checkpoint needs an action:\n{USAGE}")
        action, args = words[0], words[1:]
        if action in ("help", "-h", "--help"):
            print(USAGE)
            return
        if action not in ("save", "restore", "list", "drop"):
            raise UsageError(f"%checkpoint: unknown action {action!r}:\n{USAGE}")
        most = 0 if action == "list" else 1
        if len(args) > most:
            raise UsageError(f"%checkpoint {action}: too many arguments {' '.join(args)!r}:\n{USAGE}")
        name = args[0] if args else None
        if action == "save":
            print(self.checkpoints.save(name).summary())
        elif action == "restore":
            print(self.checkpoints.restore(name).summary())
        elif action == "list":
            print(format_list(self.checkpoints.list_checkpoints(), self.checkpoints.directory))
        else:
            if name is None:
                raise UsageError(f"%checkpoint drop needs the NAME of the checkpoint to delete:\n{USAGE}")
            self.checkpoints.drop(name)
            print(f"dropped checkpoint {name!r}")


def register(shell: Any, checkpoints: ShellCheckpoints) -> None:
    """Add %checkpoint to `shell`, working on `checkpoints` (the kernel's, shared with checkpoint_request)."""
    shell.register_magics(CheckpointMagics(shell, checkpoints))
