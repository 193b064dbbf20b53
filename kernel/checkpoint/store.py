"""Checkpoint files on disk: names, owner-only directories, atomic writes, trust checks.

Layout of a checkpoint directory (one per kernel):

    <directory>/                     0700
        .latest                      0600  {"name": ..., "saved": ...}: the latest checkpoint
        <name>/                      0700  one named checkpoint
            manifest.json            0600  committed last: the checkpoint exists once this does
            data-<token>/            0700  the variable files the manifest refers to

A save writes a fresh data-<token> directory, then replaces manifest.json by
rename; a save killed half-way leaves the old manifest and its data untouched.
This module knows nothing of namespaces or pickle (save.py, restore.py), nor
of manifests' contents (manifests.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import time
from typing import Any

from .errors import BadCheckpointName, CheckpointNotFound, CheckpointWriteError, UntrustedCheckpoint

MANIFEST = "manifest.json"
LATEST = ".latest"
DATA_PREFIX = "data-"
FORMAT = "cancelkernel-checkpoint"
FORMAT_VERSION = 1
MAX_NAME = 100
# A manifest is JSON metadata plus cell sources; anything this big is not ours.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_POSIX = hasattr(os, "geteuid")


def validate_name(name: str) -> str:
    """Return `name` if it can name a checkpoint directory, else raise BadCheckpointName."""
    if not isinstance(name, str):
        raise BadCheckpointName(f"a checkpoint name must be a string, not {type(name).__name__}")
    if not name:
        raise BadCheckpointName("a checkpoint name cannot be empty; use e.g. 'before-training'")
    if "/" in name or "\\" in name or (os.altsep and os.altsep in name) or os.sep in name:
        raise BadCheckpointName(
            f"checkpoint name {name!r} contains a path separator; use letters, digits, '.', '_' or '-'"
        )
    if ".." in name:
        raise BadCheckpointName(f"checkpoint name {name!r} contains '..'; use letters, digits, '.', '_' or '-'")
    if name.startswith("."):
        raise BadCheckpointName(
            f"checkpoint name {name!r} starts with '.' (reserved for internal files); start with a letter or digit"
        )
    if len(name) > MAX_NAME:
        raise BadCheckpointName(f"checkpoint name is {len(name)} characters long; the limit is {MAX_NAME}")
    bad = sorted(set(name) - _NAME_CHARS)
    if bad:
        raise BadCheckpointName(
            f"checkpoint name {name!r} contains {''.join(bad)!r}; use only letters, digits, '.', '_' or '-'"
        )
    return name


# -- owner-only directories and files ------------------------------------------------


def ensure_private_dir(path: str) -> str:
    """Create `path` (mode 0700) if needed; tighten it if we own it; refuse it if someone else does."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        raise CheckpointWriteError(f"cannot create the checkpoint directory {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointWriteError(f"{path} exists and is not a directory; set CheckpointSettings.directory elsewhere")
    if _POSIX:
        if st.st_uid != os.geteuid():
            raise UntrustedCheckpoint(
                f"{path} is owned by {_user(st.st_uid)}, not by you ({_user(os.geteuid())}); "
                f"set CheckpointSettings.directory to a directory of your own"
            )
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, 0o700)
    return path


def create_private_file(path: str) -> int:
    """Open a new file for writing, mode 0600, failing if it exists (never follows a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, 0o600)
    if _POSIX:
        os.fchmod(fd, 0o600)  # the umask may only remove bits; make the mode exact anyway
    return fd


def write_all(fd: int, data: Any) -> None:
    """os.write until every byte is written (one write call may write less, and at most 2 GiB on Linux)."""
    view = memoryview(data).cast("B")
    chunk = 1 << 30
    while view:
        n = os.write(fd, view[:chunk])
        view = view[n:]


def fsync_dir(path: str) -> None:
    """Make a rename or a new entry in `path` durable (a no-op where directories cannot be opened)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: str, data: bytes) -> None:
    """Write `path` through a temp file: fsync, rename, fsync the directory."""
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, f".{base}.tmp-{secrets.token_hex(4)}")
    fd = create_private_file(tmp)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    # The new file is in place; failing now would make the caller undo a write that happened.
    with contextlib.suppress(OSError):
        fsync_dir(directory)


def new_data_dir(checkpoint_dir: str) -> str:
    """A fresh, empty data directory for one save (its name is unique)."""
    token = f"{DATA_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
    path = os.path.join(checkpoint_dir, token)
    os.mkdir(path, 0o700)
    if _POSIX:
        os.chmod(path, 0o700)
    return path


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


# -- trust: unpickling runs code, so only files nobody else could have changed ----------


def check_trusted(path: str, st: os.stat_result, *, what: str, directory: bool = False) -> None:
    """Raise UntrustedCheckpoint unless `st` (of `path`) is ours, of the expected type, and not writable by others."""
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        expected = "a directory" if directory else "a regular file"
        raise UntrustedCheckpoint(
            f"refusing to restore: the {what} {path} is not {expected} (a symlink or device?). "
            f"Unpickling runs code, so only plain files written by this kernel are loaded; remove it and save again."
        )
    if not _POSIX:
        return
    if st.st_uid != os.geteuid():
        raise UntrustedCheckpoint(
            f"refusing to restore: the {what} {path} is owned by {_user(st.st_uid)}, "
            f"not by you ({_user(os.geteuid())}). Unpickling runs code, so a checkpoint someone else wrote is never "
            "loaded. If you trust it, take ownership (chown) and restore again."
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)
        raise UntrustedCheckpoint(
            f"refusing to restore: the {what} {path} is writable by {who} (mode {mode:04o}). "
            f"Unpickling runs code, so a checkpoint someone else could have changed is not loaded. "
            f"If you trust it: chmod go-w {path}, then restore again."
        )


def check_trusted_dir(path: str, *, what: str, follow: bool = False) -> None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise CheckpointNotFound(f"the {what} {path} does not exist") from None
    check_trusted(path, st, what=what, directory=True)


# Reading a checkpoint's file: never through a symlink.
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


def open_trusted(path: str, *, what: str) -> int:
    """Open a checkpoint file for reading and check the opened file itself (no race with a swap)."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise UntrustedCheckpoint(
                f"refusing to restore: the {what} {path} is a symlink; "
                "only plain files written by this kernel are loaded"
            ) from exc
        raise
    try:
        check_trusted(path, os.fstat(fd), what=what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
