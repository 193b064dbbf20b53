"""Enterprise Gateway's own venv and its kernel launchers, built once and cached.

Enterprise Gateway 3.3 pins jupyter_client 6 and jupyter_server 1, which
cannot share an environment with cancelkernel (ipykernel 7 needs
jupyter_client 8), so it gets a venv of its own under
`~/.cache/cancelkernel/` (or `$CANCELKERNEL_CACHE`), named after a hash of
the pins and the Python version: a change of either builds a new one, an
unchanged one is reused.  EG's launchers (`launch_ipykernel.py`, the
Kubernetes scripts) are in its sdist only, not in its wheel, so they are
taken from the sdist into the same directory.

    python -m cancelkernel.testing.gateway_env     # build (or find) it; prints its directory
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import typing as t
from collections.abc import Iterator
from dataclasses import dataclass

EG_VERSION = "3.3.0"
# What EG 3.3.0 resolves to; pinned so that the cache key says exactly what the venv holds.
PINS = (
    f"jupyter_enterprise_gateway=={EG_VERSION}",
    "jupyter_client==6.1.12",
    "jupyter_server==1.24.0",
    "pyzmq==24.0.1",
    "tornado==6.6.1",
    "paramiko==5.1.0",
    "pycryptodomex==3.24.2",
)
# The files taken from EG's sdist: (path in the sdist under etc/kernel-launchers/, where it goes under launchers/).
LAUNCHERS = (
    ("python/scripts/launch_ipykernel.py", "python/launch_ipykernel.py"),
    ("kubernetes/scripts/launch_kubernetes.py", "kubernetes/launch_kubernetes.py"),
    ("kubernetes/scripts/kernel-pod.yaml.j2", "kubernetes/kernel-pod.yaml.j2"),
)
SKIP_VARIABLE = "CANCELKERNEL_SKIP_GATEWAY"
PIP_TIMEOUT = 900.0


class GatewayEnvError(RuntimeError):
    """EG's venv could not be built (no network, a pin gone from the index)."""


@dataclass(frozen=True)
class GatewayEnv:
    """A built venv: its directory, its Python, and EG's launcher scripts."""

    directory: str

    @property
    def python(self) -> str:
        return os.path.join(self.directory, "bin", "python")

    @property
    def launchers(self) -> str:
        return os.path.join(self.directory, "launchers")

    @property
    def launch_ipykernel(self) -> str:
        return os.path.join(self.launchers, "python", "launch_ipykernel.py")


def cache_root() -> str:
    return os.environ.get("CANCELKERNEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cancelkernel")


def cache_key() -> str:
    """A hash of the pins and of this Python's version: what makes one venv different from another."""
    described = "\n".join([*PINS, "{}.{}".format(*sys.version_info[:2]), *(path for path, _ in LAUNCHERS)])
    return hashlib.sha256(described.encode()).hexdigest()[:12]


def gateway_env(*, log: t.Callable[[str], None] | None = None) -> GatewayEnv:
    """The cached venv, built first when it is missing (under a lock, so two test workers build it once)."""
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    directory = os.path.join(root, f"eg-venv-{EG_VERSION}-{cache_key()}")
    with _locked(os.path.join(root, ".eg-venv.lock")):
        if not os.path.exists(os.path.join(directory, "complete")):
            _build(directory, log or (lambda line: None))
    return GatewayEnv(directory)


def _build(directory: str, log: t.Callable[[str], None]) -> None:
    """The venv in place; the file `complete`, written last, marks it usable (a broken build is made again)."""
    log(f"building Enterprise Gateway {EG_VERSION}'s venv in {directory}")
    _run([sys.executable, "-m", "venv", "--clear", directory], "create the venv")
    python = os.path.join(directory, "bin", "python")
    _run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrade pip")
    _run([python, "-m", "pip", "install", "--quiet", *PINS], "install " + " ".join(PINS))
    _take_launchers(python, os.path.join(directory, "launchers"))
    with open(os.path.join(directory, "complete"), "w") as f:
        f.write("\n".join(PINS) + "\n")


def _take_launchers(python: str, into: str) -> None:
    """EG's launcher scripts from its sdist (`pip download --no-binary`), which has them under etc/."""
    with tempfile.TemporaryDirectory(prefix="eg-sdist-") as scratch:
        _run(
            [python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", "-d", scratch, PINS[0]],
            "download EG's sdist (its launchers are not in the wheel)",
        )
        (archive,) = (os.path.join(scratch, name) for name in os.listdir(scratch) if name.endswith(".tar.gz"))
        with tarfile.open(archive) as tar:
            members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
            for source, target in LAUNCHERS:
                member = members.get(f"etc/kernel-launchers/{source}")
                if member is None:
                    raise GatewayEnvError(
                        f"EG's sdist {os.path.basename(archive)} has no etc/kernel-launchers/{source}"
                    )
                extracted = tar.extractfile(member)
                assert extracted is not None
                os.makedirs(os.path.dirname(os.path.join(into, target)), exist_ok=True)
                with open(os.path.join(into, target), "wb") as out:
                    shutil.copyfileobj(extracted, out)


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise GatewayEnvError(f"could not {what}: no answer within {PIP_TIMEOUT:g} s") from exc
    if done.returncode != 0:
        said = "\n".join(line for line in (done.stderr + done.stdout).splitlines() if "ignored" not in line)[-2000:]
        raise GatewayEnvError(
            f"could not {what} for Enterprise Gateway's venv (exit {done.returncode}); it needs the package "
            f"index. Set {SKIP_VARIABLE}=1 to skip the Enterprise Gateway tests. pip said:\n{said}"
        )


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> int:
    try:
        env = gateway_env(log=lambda line: print(line, file=sys.stderr, flush=True))
    except GatewayEnvError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(env.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
