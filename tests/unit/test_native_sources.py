"""The hand-written C of the native flag is warning-clean, and its duplicated declarations agree.

Pure and fast: the compiler only checks syntax (-fsyntax-only), nothing is built
or installed, and the sources are read from the checkout (not the installed package).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sysconfig

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
NATIVE = os.path.join(ROOT, "native")
SRC = os.path.join(NATIVE, "src")
INCLUDE = os.path.join(NATIVE, "include")
PXD_COPIES = os.path.join(INCLUDE, "cancelkernel", "native")

WARNINGS = ["-Wall", "-Wextra", "-Werror"]

C_SOURCES = sorted(glob.glob(os.path.join(SRC, "*.c")))
HEADERS = sorted(glob.glob(os.path.join(SRC, "*.h")) + glob.glob(os.path.join(INCLUDE, "*.h")))
PXDS = ["__init__.pxd", "_flag.pxd"]


def _compiler() -> list[str]:
    """Python's own C compiler (as setuptools would use it), else `cc`; skip if neither is on PATH."""
    candidates = []
    configured = sysconfig.get_config_var("CC")
    if configured:
        candidates.append(shlex.split(configured))
    candidates.append(["cc"])
    for argv in candidates:
        if argv and shutil.which(argv[0]):
            return argv
    pytest.skip(f"no C compiler on PATH (tried {', '.join(c[0] for c in candidates if c)})")


def _syntax_check(args: list[str]) -> None:
    command = [
        *_compiler(),
        "-fsyntax-only",
        *WARNINGS,
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{SRC}",
        f"-I{INCLUDE}",
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"{shlex.join(command)}\nexit {result.returncode}\n{output}"
    assert not output, f"{shlex.join(command)}\nthe compiler said something:\n{output}"


def test_there_are_c_sources():
    assert [os.path.basename(p) for p in C_SOURCES] == ["flag.c", "sigint.c", "yield.c"], C_SOURCES


@pytest.mark.parametrize("source", C_SOURCES, ids=os.path.basename)
def test_c_source_is_warning_clean(source: str):
    _syntax_check([source])


@pytest.mark.parametrize("header", HEADERS, ids=lambda p: os.path.relpath(p, NATIVE))
def test_header_is_self_contained_and_warning_clean(header: str):
    _syntax_check(["-x", "c", header])


@pytest.mark.parametrize("name", PXDS)
def test_pxd_copies_are_identical(name: str):
    # The copies exist so that Cython finds the .pxd by dotted name (see setup.py's pxd_tree()).
    with open(os.path.join(NATIVE, name), "rb") as original, open(os.path.join(PXD_COPIES, name), "rb") as copy:
        assert copy.read() == original.read(), f"native/include/cancelkernel/native/{name} differs from native/{name}"


def _guarded_block(text: str) -> list[str]:
    """The lines from `#ifndef CANCELKERNEL_FLAG_PXD_C` to its `#endif`, stripped of indentation."""
    match = re.search(r"^[ \t]*#ifndef CANCELKERNEL_FLAG_PXD_C\n.*?^[ \t]*#endif[^\n]*$", text, re.M | re.S)
    assert match, "no #ifndef CANCELKERNEL_FLAG_PXD_C block"
    return [line.strip() for line in match.group(0).splitlines()]


def test_flag_h_defines_ck_state_t_exactly_as_flag_pxd():
    # Both define ck_state_t and ck_load_cancelled under one guard; only identical text keeps them one type.
    with open(os.path.join(NATIVE, "_flag.pxd"), encoding="utf-8") as f:
        pxd = _guarded_block(f.read())
    with open(os.path.join(SRC, "flag.h"), encoding="utf-8") as f:
        header = _guarded_block(f.read())
    assert header == pxd


def test_fallback_has_as_many_slots_as_flag_h():
    # Both let this many threads run cells at once; the fallback cannot read the C constant.
    with open(os.path.join(SRC, "flag.h"), encoding="utf-8") as f:
        c_slots = re.search(r"^#define CK_SLOTS (\d+)$", f.read(), re.M)
    with open(os.path.join(NATIVE, "_fallback.py"), encoding="utf-8") as f:
        python_slots = re.search(r"^_SLOTS = (\d+)\b", f.read(), re.M)
    assert c_slots
    assert python_slots
    assert c_slots.group(1) == python_slots.group(1)
