"""Unit tests: the project's own bookkeeping: the version written once, and every docs citation in the code resolves."""

from __future__ import annotations

import json
import os
import re

import cancelkernel

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# Where code cites the docs: the Python, Cython and TypeScript sources, the tests and the benchmarks.
CODE = ("kernel", "native", "kernelspec", os.path.join("labextension", "src"), "tests", "benchmarks")
SUFFIXES = (".py", ".pyx", ".pxd", ".ts")
# `docs/<name>.md`, optionally followed by a section in quotes, after a comma or in parentheses.
CITATION = re.compile(r"docs/([\w./-]+\.md)(?:,\s*|\s+\(|\s+)?(?:\"([^\"\n]+)\")?")


def sources() -> list[str]:
    found = []
    for top in CODE:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "artifacts", "__pycache__")]
            found += [os.path.join(folder, f) for f in files if f.endswith(SUFFIXES)]
    return found


def headings(doc: str) -> set[str]:
    """A doc's headings, each also without its parenthesised tail ("Events (iopub)" answers to "Events")."""
    with open(doc, encoding="utf-8") as f:
        titles = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    return set(titles) | {title.split(" (", 1)[0] for title in titles}


def test_every_docs_citation_in_the_code_names_a_file_and_section_that_exist() -> None:
    wrong = []
    for path in sources():
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"\s*\n\s*(#|//|\*)?\s*", " ", f.read())  # a citation may wrap across comment lines
        for name, section in CITATION.findall(text):
            doc = os.path.join(ROOT, "docs", name)
            where = os.path.relpath(path, ROOT)
            if not os.path.isfile(doc):
                wrong.append(f"{where}: docs/{name} does not exist")
            elif section and section not in headings(doc):
                wrong.append(f'{where}: docs/{name} has no section "{section}"')
    assert not wrong, "\n".join(wrong)


def test_the_version_is_written_once() -> None:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert 'version = {attr = "cancelkernel.__version__"}' in pyproject
    # npm needs a version in package.json: it must be the same one.
    with open(os.path.join(ROOT, "labextension", "package.json"), encoding="utf-8") as f:
        assert json.load(f)["version"] == cancelkernel.__version__
    with open(os.path.join(ROOT, "docs", "enterprise-gateway", "kubernetes", "kernel.json"), encoding="utf-8") as f:
        assert cancelkernel.__version__ not in f.read()  # an image TAG the user chooses, not a copy of the version


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in helper modules (cancelkernel.testing, tests/integration/helpers.py, mcp_helpers.py,
    lab_page.py, tests/gateway/gateway_helpers.py) and conftest.py."""
    wrong = []
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "tests")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    wrong += [f"{name}: {line.strip()}" for line in f if re.match(r"\s*(from|import) test_\w+", line)]
    assert not wrong, "\n".join(wrong)


def test_no_two_test_modules_share_a_name() -> None:
    """The test folders are not packages: pytest imports each module by its bare name, so two of one name clash."""
    seen: dict[str, list[str]] = {}
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "tests")):
        if "node_modules" in folder:
            continue
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                seen.setdefault(name, []).append(os.path.relpath(os.path.join(folder, name), ROOT))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, clashes
