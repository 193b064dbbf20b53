"""ipykernel's own kernel-level tests, run against stock ipykernel and against ours as `python3`.

    python tests/upstream/ipykernel_suite.py [--workdir DIR]

Downloads the sdist of the installed ipykernel (its tests are not in the
wheel), runs FILES once with stock ipykernel's kernelspec and once with ours,
both installed as `python3` in private prefixes, and fails when a test that
passes on stock does not pass on ours.  Tests that fail on stock too are
listed, not counted.  Each run's pytest output goes to a log in the work
directory; its tail is printed when the comparison fails.  `.ci/run` runs it
after the suite; it needs the test extra (pytest-asyncio, flaky, hatchling).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

import ipykernel

FILES = [
    "tests/test_kernel.py",
    "tests/test_message_spec.py",
    "tests/test_subshells.py",
    "tests/test_async.py",
    "tests/test_start_kernel.py",
]


def fetch_sources(workdir: str) -> str:
    """The extracted sdist of the installed ipykernel version."""
    version = ipykernel.__version__
    print(f"== ipykernel {version}: downloading its sdist", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "--dest",
            workdir,
            f"ipykernel=={version}",
        ],
        check=True,
    )
    archive = glob.glob(os.path.join(workdir, f"ipykernel-{version}.tar.gz"))[0]
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return os.path.join(workdir, f"ipykernel-{version}")


def install_spec(kind: str, prefix: str) -> str:
    """A `python3` kernelspec of `kind` ("stock" or "ours") in `prefix`; returns the JUPYTER_PATH entry."""
    if kind == "stock":
        subprocess.run(
            [sys.executable, "-m", "ipykernel", "install", "--prefix", prefix, "--name", "python3"],
            check=True,
            capture_output=True,
        )
    else:
        from cancelkernel.kernelspec import install

        install(prefix=prefix, name="python3")
    return os.path.join(prefix, "share", "jupyter")


def run(sources: str, kind: str, workdir: str) -> dict[str, str]:
    """Outcome ("passed", "failed", "skipped") of every test, with `kind` as the python3 kernel."""
    jupyter_path = install_spec(kind, os.path.join(workdir, f"spec-{kind}"))
    report = os.path.join(workdir, f"{kind}.xml")
    here = os.path.dirname(os.path.abspath(__file__))
    env = {
        **os.environ,
        "JUPYTER_PATH": jupyter_path,
        "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
    }
    log = os.path.join(workdir, f"{kind}.log")
    print(f"== ipykernel's tests with {kind} as python3 (log: {log})", flush=True)
    with open(log, "w") as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no_cov_plugin",
                "-n",
                "2",
                "-o",
                "asyncio_default_fixture_loop_scope=function",
                f"--junitxml={report}",
                *FILES,
            ],
            cwd=sources,
            env=env,
            check=False,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcomes[name] = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="where to download and run (default: a temporary directory)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="cancelkernel-ipykernel-suite-")
    sources = fetch_sources(workdir)
    stock, ours = run(sources, "stock", workdir), run(sources, "ours", workdir)
    worse = sorted(t for t, outcome in stock.items() if outcome == "passed" and ours.get(t) != "passed")
    both = sorted(t for t, outcome in stock.items() if outcome == "failed")
    print(
        f"== stock: {sum(v == 'passed' for v in stock.values())} passed; ours: "
        f"{sum(v == 'passed' for v in ours.values())} passed of {len(stock)} (skipped on stock: "
        f"{sum(v == 'skipped' for v in stock.values())})"
    )
    for test in both:
        print(f"   fails on stock too: {test} (ours: {ours.get(test)})")
    for test in worse:
        print(f"   PASSES ON STOCK, NOT ON OURS: {test} (ours: {ours.get(test, 'not run')})")
    if not stock or not ours or worse:
        with open(os.path.join(workdir, "ours.log")) as f:
            print("".join(f.readlines()[-60:]))
    if not stock or not ours:
        print("== no results: the run itself failed")
        return 1
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
