"""Build the Cython cancellation flag and the JupyterLab extension; everything else is in pyproject.toml.

Both are optional.  Without Cython or a C compiler the install still succeeds
and cancelkernel.native falls back to its pure-Python flag.  Without Node.js
and npm the install still succeeds without the JupyterLab extension, saying so
once; a wheel or sdist built where npm was found carries the built extension,
so installing from it needs no node.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join("native", "include")
SRC = os.path.join("native", "src")  # the flag's hand-written C core, bound by _flag.pyx
C_SOURCES = ("flag.c", "sigint.c", "yield.c")


def pxd_tree() -> str:
    """build/cython-include/cancelkernel/native/: the package's .pxd files under their dotted name.

    Cython finds a module's own .pxd by matching its dotted name against
    directories, and `cancelkernel.native` lives in native/, so without this
    tree it would silently build _flag without its .pxd (and export nothing).
    """
    root = os.path.join("build", "cython-include")
    target = os.path.join(root, "cancelkernel", "native")
    os.makedirs(target, exist_ok=True)
    for name in ("__init__.pxd", "_flag.pxd"):
        content = _read(os.path.join("native", name))
        copy = os.path.join(target, name)
        if not os.path.exists(copy) or _read(copy) != content:  # unchanged mtimes spare a re-cythonize
            with open(copy, "wb") as f:
                f.write(content)
    return root


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def native_extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("cancelkernel: Cython not found; installing the pure-Python flag only", file=sys.stderr)
        return []
    flag = Extension(
        "cancelkernel.native._flag",
        [os.path.join("native", "_flag.pyx"), *(os.path.join(SRC, name) for name in C_SOURCES)],
        include_dirs=[SRC, INCLUDE],
        # Listed so a changed header rebuilds the extension and ships in the sdist.
        depends=[os.path.join(SRC, "flag.h"), os.path.join(INCLUDE, "cancelkernel_native.h")],
    )
    try:
        extensions = cythonize(
            [flag],
            include_path=[pxd_tree()],
            # Compiler output stays in build/, out of the package directory.
            build_dir=os.path.join("build", "cython"),
            compiler_directives={"language_level": 3},
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - a broken Cython must not break the install
        print(f"cancelkernel: cythonize failed ({exc}); installing the pure-Python flag only", file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # no compiler: build_ext warns and the fallback is used
    return extensions


LAB_SOURCE = "labextension"  # the extension's TypeScript project (package.json, package-lock.json, src/)
LAB_BUILT = os.path.join("kernel", "labextension")  # its build output: cancelkernel/labextension once installed
LAB_NAME = "cancelkernel-jupyterlab"
LAB_SHARE = os.path.join("share", "jupyter", "labextensions", LAB_NAME)
SERVER_CONFIG = os.path.join("etc", "jupyter", "jupyter_server_config.d")


def _newest(paths: list) -> float:
    times = [0.0]
    for path in paths:
        if os.path.isfile(path):
            times.append(os.path.getmtime(path))
        for root, _dirs, files in os.walk(path):
            times.extend(os.path.getmtime(os.path.join(root, name)) for name in files)
    return max(times)


def _lab_stale() -> bool:
    """The built extension is missing, or older than a source next to it."""
    built = os.path.join(LAB_BUILT, "package.json")
    if not os.path.exists(built):
        return True
    sources = [
        os.path.join(LAB_SOURCE, name) for name in ("src", "schema", "style", "package.json", "package-lock.json")
    ]
    return _newest(sources) > _newest([LAB_BUILT])


def build_labextension() -> None:
    """Build the JupyterLab extension with npm when it is missing or stale (PEP 517 runs setup.py once per hook)."""
    if os.environ.get("CANCELKERNEL_SKIP_LABEXTENSION") or not os.path.isdir(LAB_SOURCE) or not _lab_stale():
        return
    npm = shutil.which("npm")
    if npm is None:
        said = os.path.join("build", "labextension-not-built")  # PEP 517 runs this file once per hook: say it once
        if not os.path.exists(os.path.join(LAB_BUILT, "package.json")) and not os.path.exists(said):
            os.makedirs("build", exist_ok=True)
            open(said, "w").close()
            print(
                "cancelkernel: the JupyterLab extension was not built (npm not found); the kernel works without it. "
                "To get it: install Node.js 20 or newer with npm, then install cancelkernel again.",
                file=sys.stderr,
            )
        return
    try:
        if not os.path.isdir(os.path.join(LAB_SOURCE, "node_modules")):
            print("cancelkernel: building the JupyterLab extension (npm ci, then npm run build:prod)", file=sys.stderr)
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=LAB_SOURCE,
                check=True,
                stdout=sys.stderr,
            )
        subprocess.run([npm, "run", "--silent", "build:prod"], cwd=LAB_SOURCE, check=True, stdout=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"cancelkernel: building the JupyterLab extension failed ({exc}); installing without it", file=sys.stderr)


def lab_data_files() -> list:
    """The built extension under share/jupyter/labextensions/, and the server extension's switch under etc/jupyter/."""
    files = [(SERVER_CONFIG, [os.path.join(LAB_SOURCE, "jupyter-config", "cancelkernel.json")])]
    if not os.path.exists(os.path.join(LAB_BUILT, "package.json")):
        return files
    for root, _dirs, names in os.walk(LAB_BUILT):
        relative = os.path.relpath(root, LAB_BUILT)
        target = LAB_SHARE if relative == "." else os.path.join(LAB_SHARE, relative)
        files.append((target, [os.path.join(root, name) for name in sorted(names)]))
    files.append((LAB_SHARE, [os.path.join(LAB_SOURCE, "install.json")]))
    return files


os.chdir(HERE)  # cythonize and the relative paths above expect the project root
build_labextension()
setup(ext_modules=native_extensions(), data_files=lab_data_files())
