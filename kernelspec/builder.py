"""Build, install and remove our kernelspecs (the one place that knows what kernel.json holds)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from importlib import resources

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from ..durations import DurationError, parse_duration
from ..protocol import KERNEL_PROTOCOL_VERSION, PROTOCOL_VERSION

DEFAULT_NAME = "cancelkernel"
DEFAULT_DISPLAY_NAME = "Python 3 (cancelkernel)"
LOGOS = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")
# How Jupyter delivers an interrupt (kernelspec interrupt_mode): SIGINT to the process group, or interrupt_request.
INTERRUPT_MODES = ("signal", "message")
# Spec names the agent client can start even when nothing is installed: name -> exec_thread.
OUR_KERNELS = {"cancelkernel": "main", "cancelkernel-worker": "worker"}


class InstallError(Exception):
    """The kernelspec could not be built, installed or removed; the message says why and what to do."""


def kernel_json(
    *,
    display_name: str = DEFAULT_DISPLAY_NAME,
    exec_thread: str = "main",
    interrupt_grace: float | str | None = None,
    extra_args: list[str] | None = None,
    python: str | None = None,
    interrupt_mode: str | None = None,
    checkpoint_root: str | None = None,
) -> dict:
    """The kernel.json for `python` (default: this interpreter), with kernel options baked into argv."""
    template = json.loads(resources.files("cancelkernel.kernelspec").joinpath("kernel.json").read_text())
    if exec_thread not in OUR_KERNELS.values():
        raise InstallError(f"--exec-thread must be 'main' or 'worker', not {exec_thread!r}")
    argv = [(python or sys.executable) if a == "{python}" else a for a in template["argv"]]
    if exec_thread != "main":
        argv.append(f"--CancelKernel.exec_thread={exec_thread}")
    if interrupt_grace is not None:
        try:
            grace = parse_duration(interrupt_grace, "--interrupt-grace")
        except DurationError as exc:
            raise InstallError(str(exc)) from None
        argv.append(f"--CancelKernel.interrupt_grace={grace:g}")
    if checkpoint_root is not None:
        argv.append(f"--CheckpointSettings.root={checked_root(checkpoint_root)}")
    argv.extend(extra_args or [])
    spec = dict(template, argv=argv, display_name=display_name)
    if interrupt_mode is not None:
        if interrupt_mode not in INTERRUPT_MODES:
            raise InstallError(f"--interrupt-mode must be one of {', '.join(INTERRUPT_MODES)}, not {interrupt_mode!r}")
        spec["interrupt_mode"] = interrupt_mode
    # What stock ipykernel's kernel.json says too: Jupyter Server shows kernel_protocol_version,
    # clients read the metadata.
    spec["kernel_protocol_version"] = KERNEL_PROTOCOL_VERSION
    spec["metadata"] = {
        # The debugger needs user code on the main thread.
        "debugger": exec_thread == "main",
        # ipykernel's app, which ours is, takes CurveZMQ keys from the connection file.
        "supported_encryption": ["curve"],
        "cancelkernel": {"protocol_version": PROTOCOL_VERSION, "exec_thread": exec_thread},
    }
    return spec


def checked_root(root: str) -> str:
    """A checkpoint root for a kernelspec: absolute, or under `~` (each user's home, expanded by the kernel)."""
    if not root or not os.path.isabs(os.path.expanduser(root)):
        raise InstallError(
            f"--checkpoint-root must be an absolute path (or start with ~), not {root!r}: a kernel resolves a "
            "relative one against its working directory, which is each notebook's"
        )
    return root


def write_spec(directory: str, spec: dict) -> None:
    """kernel.json and the logos into `directory` (which exists)."""
    source = resources.files("cancelkernel.kernelspec")
    for logo in LOGOS:
        item = source.joinpath(logo)
        if item.is_file():
            with open(os.path.join(directory, logo), "wb") as f:
                f.write(item.read_bytes())
    with open(os.path.join(directory, "kernel.json"), "w") as f:
        json.dump(spec, f, indent=2)


def private_spec_dir(name: str, **options: object) -> str:
    """A temporary kernels directory holding spec `name` (one of OUR_KERNELS unless exec_thread is given).

    For a `KernelSpecManager(kernel_dirs=[it])`; the caller removes it with shutil.rmtree.
    """
    options.setdefault("exec_thread", OUR_KERNELS.get(name, "main"))
    options.setdefault("display_name", name)
    root = tempfile.mkdtemp(prefix="cancelkernel-spec-")
    os.makedirs(os.path.join(root, name))
    write_spec(os.path.join(root, name), kernel_json(**options))  # type: ignore[arg-type]
    return root


def install(
    *,
    name: str = DEFAULT_NAME,
    display_name: str = DEFAULT_DISPLAY_NAME,
    user: bool = False,
    prefix: str | None = None,
    exec_thread: str = "main",
    interrupt_grace: float | str | None = None,
    extra_args: list[str] | None = None,
    interrupt_mode: str | None = None,
    checkpoint_root: str | None = None,
) -> str:
    """Write the kernelspec; return the directory it was installed to."""
    if not name or os.sep in name or (os.altsep and os.altsep in name) or name in (".", ".."):
        raise InstallError(f"kernel name {name!r} is not usable as a directory name; pick e.g. 'cancelkernel-worker'")
    spec = kernel_json(
        display_name=display_name,
        exec_thread=exec_thread,
        interrupt_grace=interrupt_grace,
        extra_args=extra_args,
        interrupt_mode=interrupt_mode,
        checkpoint_root=checkpoint_root,
    )
    with tempfile.TemporaryDirectory() as tmp:
        write_spec(tmp, spec)
        try:
            return KernelSpecManager().install_kernel_spec(tmp, kernel_name=name, user=user, prefix=prefix)
        except OSError as exc:
            where = prefix or ("your user kernels directory" if user else "the system kernels directory")
            raise InstallError(
                f"cannot write the kernelspec into {where}: {exc.strerror or exc}. "
                f"Use --user, --sys-prefix or --prefix DIR with a directory you can write to."
            ) from exc


def uninstall(*, name: str = DEFAULT_NAME) -> str:
    """Remove an installed kernelspec; return the directory removed."""
    ksm = KernelSpecManager()
    try:
        path = ksm.get_kernel_spec(name).resource_dir
    except NoSuchKernel as exc:
        raise InstallError(f"no kernelspec named {name!r} is installed (see `jupyter kernelspec list`)") from exc
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise InstallError(f"cannot remove {path}: {exc.strerror or exc}") from exc
    return path
