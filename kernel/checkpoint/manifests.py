"""Manifests (what a checkpoint holds), the latest marker, listing and dropping checkpoints."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import BadCheckpointName, CheckpointNotFound, CheckpointStoreError, CheckpointWriteError, CorruptCheckpoint
from .store import (
    DATA_PREFIX,
    FORMAT,
    FORMAT_VERSION,
    LATEST,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    READ_FLAGS,
    check_trusted,
    check_trusted_dir,
    open_trusted,
    remove_quietly,
    remove_tree,
    validate_name,
    write_file_atomic,
)


def checkpoint_dir(directory: str, name: str) -> str:
    return os.path.join(directory, validate_name(name))


def write_manifest(checkpoint_path: str, manifest: dict) -> None:
    """Commit a save: after this rename the new checkpoint is the one that loads."""
    data = json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8")
    write_file_atomic(os.path.join(checkpoint_path, MANIFEST), data)


def read_manifest(checkpoint_path: str, *, trusted: bool = True) -> dict:
    """The manifest of one checkpoint; with `trusted`, refuse files others own or can write."""
    path = os.path.join(checkpoint_path, MANIFEST)
    try:
        fd = open_trusted(path, what="checkpoint manifest") if trusted else os.open(path, READ_FLAGS)
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
    except (OSError, ValueError, AttributeError, CheckpointStoreError):
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
        except CheckpointStoreError as exc:
            yield CheckpointInfo(name, path, 0.0, 0, 0, 0, problem=str(exc))
            continue
        totals = m.get("totals", {})
        info = CheckpointInfo(
            name,
            path,
            float(m.get("saved", 0.0)),
            int(totals.get("names", 0)),
            int(totals.get("skipped", 0)),
            int(totals.get("bytes", 0)),
        )
        try:
            check_trusted_dir(path, what="checkpoint directory")
            check_trusted(
                os.path.join(path, MANIFEST), os.lstat(os.path.join(path, MANIFEST)), what="checkpoint manifest"
            )
        except CheckpointStoreError as exc:
            info.problem = str(exc)
        yield info


def list_checkpoints(directory: str) -> list[CheckpointInfo]:
    """The checkpoints in `directory`, newest first, the latest one marked (reads manifests only)."""
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
            remove_quietly(path)


def not_found(directory: str, name: str) -> CheckpointNotFound:
    """No checkpoint `name` in `directory`: the error names those there are."""
    available = ", ".join(i.name for i in list_checkpoints(directory)) or "none"
    return CheckpointNotFound(f"no checkpoint named {name!r} in {directory} (available: {available})")


def drop(directory: str, name: str) -> str:
    """Delete checkpoint `name`; move the latest mark to the newest remaining one. Returns the path removed."""
    path = checkpoint_dir(directory, name)  # refuses a bad name before anything is touched
    if not os.path.isdir(path) or os.path.islink(path):
        raise not_found(directory, name)
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
            remove_quietly(os.path.join(directory, LATEST))
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
            remove_quietly(path)
