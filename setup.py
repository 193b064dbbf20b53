"""Build the Cython cancellation flag; everything else is in pyproject.toml.

The flag is optional: without Cython or a C compiler the install still
succeeds and cancelkernel.native falls back to its pure-Python flag.
"""

import os
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


os.chdir(HERE)  # cythonize and the relative paths above expect the project root
setup(ext_modules=native_extensions())
