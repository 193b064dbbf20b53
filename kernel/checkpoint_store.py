"""Checkpoint files on disk: names, owner-only directories, atomic writes, trust checks.

Layout of a checkpoint directory (one per kernel):

    <directory>/                     0700
        .latest                      0600  {"name": ..., "saved": ...}: the latest checkpoint
        <name>/                      0700  one named checkpoint
            manifest.json            0600  committed last: the checkpoint exists once this does
            data-<token>/            0700  the variable files the manifest refers to

A save writes a fresh data-<token> directory, then replaces manifest.json by
rename; a save killed half-way leaves the old manifest and its data untouched.
This module knows nothing of namespaces or pickle (see checkpoint.py).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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


def validate_name(name: str) -> str:
    """Return `name` if it can name a checkpoint directory, else raise BadCheckpointName."""
    if not isinstance(name, str):
        raise BadCheckpointName(f"a checkpoint name must be a string, not {type(name).__name__}")
    if not name:
        raise BadCheckpointName("a checkpoint name cannot be empty; use e.g. 'before-training'")
    if "/" in name or "\\" in name or (os.altsep and os.altsep in name) or os.sep in name:
        raise BadCheckpointName(f"checkpoint name {name!r} contains a path separator; use letters, digits, '.', '_' or '-'")
    if ".." in name:
        raise BadCheckpointName(f"checkpoint name {name!r} contains '..'; use letters, digits, '.', '_' or '-'")
    if name.startswith("."):
        raise BadCheckpointName(f"checkpoint name {name!r} starts with '.' (reserved for internal files); start with a letter or digit")
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
        _remove_quietly(tmp)
        raise
    try:
        fsync_dir(directory)
    except OSError:
        pass  # the new file is in place; failing now would make the caller undo a write that happened


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


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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
            f"refusing to restore: the {what} {path} is owned by {_user(st.st_uid)}, not by you ({_user(os.geteuid())}). "
            f"Unpickling runs code, so a checkpoint someone else wrote is never loaded. "
            f"If you trust it, take ownership (chown) and restore again."
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


def open_trusted(path: str, *, what: str) -> int:
    """Open a checkpoint file for reading and check the opened file itself (no race with a swap)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise UntrustedCheckpoint(
                f"refusing to restore: the {what} {path} is a symlink; only plain files written by this kernel are loaded"
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


# -- manifests and the latest marker ---------------------------------------------------


def checkpoint_dir(directory: str, name: str) -> str:
    return os.path.join(directory, validate_name(name))


def write_manifest(checkpoint_path: str, manifest: dict) -> None:
    """Commit a save: after this rename the new checkpoint is the one that loads."""
    data = json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8")
    write_file_atomic(os.path.join(checkpoint_path, MANIFEST), data)


def read_manifest(checkpoint_path: str, *, trusted: bool = True) -> dict:
    """The manifest of one checkpoint; with `trusted`, refuse files others own or can write."""
    path = os.path.join(checkpoint_path, MANIFEST)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = open_trusted(path, what="checkpoint manifest") if trusted else os.open(path, flags)
    except FileNotFoundError:
        raise CheckpointNotFound(f"no checkpoint manifest at {path}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise CorruptCheckpoint(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ValueError("larger than any manifest this kernel writes")
        manifest = json.loads(raw.decode("utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} manifest")
        if manifest.get("version") != FORMAT_VERSION:
            raise ValueError(f"format version {manifest.get('version')!r}, this kernel reads version {FORMAT_VERSION}")
        if not isinstance(manifest.get("entries"), list) or not isinstance(manifest.get("data"), str):
            raise ValueError("entries or data directory missing")
        if not manifest["data"].startswith(DATA_PREFIX):
            raise ValueError(f"data directory {manifest['data']!r} is not one this kernel writes")
        validate_name(manifest["data"])
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpoint(
            f"the manifest {path} is damaged ({exc}); restore another checkpoint (%checkpoint list) or save again"
        ) from exc
    return manifest


def write_latest(directory: str, name: str, saved: float) -> None:
    write_file_atomic(os.path.join(directory, LATEST), json.dumps({"name": name, "saved": saved}).encode())


def read_latest(directory: str) -> str | None:
    """Name recorded as latest, or None (missing, unreadable or not a valid name)."""
    try:
        with open(os.path.join(directory, LATEST), "rb") as f:
            name = json.loads(f.read(4096)).get("name")
        return validate_name(name)
    except (OSError, ValueError, AttributeError, CheckpointError):
        return None


@dataclass
class CheckpointInfo:
    """One checkpoint as `list_checkpoints` shows it."""

    name: str
    path: str
    saved: float  # time.time() of the save
    names: int  # variables stored
    skipped: int  # variables left out
    bytes: int  # bytes of variable files
    latest: bool = False
    problem: str | None = None  # why it would not load (untrusted, damaged), if known

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "saved": self.saved,
            "saved_iso": _iso(self.saved),
            "names": self.names,
            "skipped": self.skipped,
            "bytes": self.bytes,
            "latest": self.latest,
            "problem": self.problem,
        }


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else ""


def iter_checkpoints(directory: str) -> Iterator[CheckpointInfo]:
    """Every committed checkpoint in `directory` (reading manifests only, no unpickling)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(directory, name)
        if not os.path.isfile(os.path.join(path, MANIFEST)):
            continue  # a directory whose first save never committed
        try:
            validate_name(name)
        except BadCheckpointName:
            continue
        try:
            m = read_manifest(path, trusted=False)
        except CheckpointError as exc:
            yield CheckpointInfo(name, path, 0.0, 0, 0, 0, problem=str(exc))
            continue
        totals = m.get("totals", {})
        info = CheckpointInfo(
            name, path, float(m.get("saved", 0.0)), int(totals.get("names", 0)), int(totals.get("skipped", 0)), int(totals.get("bytes", 0))
        )
        try:
            check_trusted_dir(path, what="checkpoint directory")
            check_trusted(os.path.join(path, MANIFEST), os.lstat(os.path.join(path, MANIFEST)), what="checkpoint manifest")
        except CheckpointError as exc:
            info.problem = str(exc)
        yield info


def list_infos(directory: str) -> list[CheckpointInfo]:
    """Checkpoints newest first, the latest one marked."""
    infos = sorted(iter_checkpoints(directory), key=lambda i: i.saved, reverse=True)
    latest = latest_name(directory, infos)
    for info in infos:
        info.latest = info.name == latest
    return infos


def latest_name(directory: str, infos: list[CheckpointInfo] | None = None) -> str | None:
    """The marked latest checkpoint if it still exists, else the newest committed one."""
    if infos is None:
        infos = list(iter_checkpoints(directory))
    present = {i.name for i in infos}
    marked = read_latest(directory)
    if marked in present:
        return marked
    if not infos:
        return None
    return max(infos, key=lambda i: i.saved).name


def remove_stale(checkpoint_path: str, keep: str) -> None:
    """Remove data directories and temp files of this checkpoint other than `keep` (old saves, killed saves)."""
    try:
        entries = os.listdir(checkpoint_path)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(checkpoint_path, entry)
        if entry.startswith(DATA_PREFIX) and entry != keep:
            remove_tree(path)
        elif entry.startswith(f".{MANIFEST}.tmp-"):
            _remove_quietly(path)


def drop_checkpoint(directory: str, name: str) -> str:
    """Delete one named checkpoint; move the latest mark to the newest remaining one. Returns its path."""
    path = checkpoint_dir(directory, name)
    if not os.path.isdir(path) or os.path.islink(path):
        available = ", ".join(i.name for i in list_infos(directory)) or "none"
        raise CheckpointNotFound(f"no checkpoint named {name!r} in {directory} (available: {available})")
    # Rename first so the checkpoint disappears at once, even if the delete is slow or interrupted.
    doomed = os.path.join(directory, f".dropped-{name}-{secrets.token_hex(4)}")
    try:
        os.rename(path, doomed)
    except OSError as exc:
        raise CheckpointWriteError(f"cannot drop checkpoint {name!r} ({path}): {exc.strerror or exc}") from exc
    remove_tree(doomed)
    if read_latest(directory) == name:
        newest = latest_name(directory)
        if newest is None:
            _remove_quietly(os.path.join(directory, LATEST))
        else:
            info = next(i for i in iter_checkpoints(directory) if i.name == newest)
            write_latest(directory, newest, info.saved)
    return path


def remove_leftovers(directory: str) -> None:
    """Temp files and half-dropped checkpoints of interrupted operations at the top level."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(directory, entry)
        if entry.startswith(".dropped-"):
            remove_tree(path)
        elif entry.startswith(f"{LATEST}.tmp-") or entry.startswith(f".{LATEST}.tmp-"):
            _remove_quietly(path)
