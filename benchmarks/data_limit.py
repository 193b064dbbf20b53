"""What the memory guard's data limit breaks: ordinary library work under RLIMIT_DATA,
beside RLIMIT_AS, in a real cgroup.

    python benchmarks/data_limit.py [--limit 1G] [--json PATH]   (root: it makes memory cgroups)

Each probe runs twice as a cell of our kernel (main mode), each time in a fresh
kernel inside a memory cgroup of `--limit`: once with the guard's data limit
(the kernel sets RLIMIT_DATA from the cgroup's limit, docs/memory.md), once with
it off and RLIMIT_AS of the limit's size set by a first cell instead (the other
way to turn one huge allocation into an error).  A probe whose library is not installed in this
Python says so instead of a result.  Output: a markdown table, one row per
probe: "works", the exception's name, or "died" (the process was killed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Kernel, environment, kernels_cleaned_up, markdown_table, wait_reply, write_json

from cancelkernel.sizes import parse_size
from cancelkernel.testing import private_kernelspecs
from cancelkernel.testing.cgroups import memory_cgroup

# (what, the module it needs or None, the code: it must end without error when the library works).
PROBES = [
    (
        "import numpy, pandas; 1e6-row DataFrame groupby",
        "pandas",
        "import numpy as np, pandas as pd\ndf = pd.DataFrame({'k': np.arange(10**6) % 7, 'v': np.ones(10**6)})\n"
        "assert len(df.groupby('k').v.sum()) == 7",
    ),
    ("np.ones 400 MB", "numpy", "import numpy as np\na = np.ones(50 * 10**6)\nassert a.sum() == 50 * 10**6"),
    ("np.ones 8 GB", "numpy", "import numpy as np\na = np.ones(10**9)"),
    ("bytearray(10**11)", None, "a = bytearray(10**11)"),
    (
        "start and join 100 threads",
        None,
        "import threading\nts = [threading.Thread(target=lambda: None) for _ in range(100)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]",
    ),
    (
        "torch: import, 2000x2000 matmul on its thread pool",
        "torch",
        "import torch\na = torch.randn(2000, 2000)\nassert torch.isfinite((a @ a).sum())",
    ),
    ("torch.empty 8 GB", "torch", "import torch\na = torch.empty(2 * 10**9)"),
    (
        "torch DataLoader, 2 forked workers",
        "torch",
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "ds = TensorDataset(torch.arange(1000.0))\n"
        "assert sum(len(b[0]) for b in DataLoader(ds, batch_size=100, num_workers=2)) == 1000",
    ),
    (
        "jax: import, jit a matmul",
        "jax",
        "import jax, jax.numpy as jnp\nf = jax.jit(lambda a: a @ a)\n"
        "assert float(f(jnp.ones((500, 500))).sum()) == 500.0 ** 3",
    ),
    (
        "numba njit(parallel=True)",
        "numba",
        "import numba, numpy as np\n@numba.njit(parallel=True)\ndef total(a):\n    s = 0.0\n"
        "    for i in numba.prange(a.size):\n        s += a[i]\n    return s\nassert total(np.ones(10**6)) == 10**6",
    ),
]


def in_our_kernel(code: str, limit: int, *, address_limit: bool) -> str:
    """'works', the exception's name, or 'died': the probe as a cell of our kernel in a cgroup of `limit`.

    With `address_limit` the kernel's own data limit is off and a first cell sets RLIMIT_AS to `limit` instead.
    """
    arguments = ["--CancelKernel.memory_data_limit=False"] if address_limit else []
    first = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))" if address_limit else "pass"
    with memory_cgroup(limit) as cgroup:
        kernel = Kernel("cancelkernel", extra_arguments=arguments).start()
        try:
            cgroup.add(kernel.km.provisioner.pid)
            # A first cell: the guard reads the cgroup it now lives in (and sets its data limit) before the probe.
            reply = wait_reply(kernel.kc, kernel.kc.execute(first), timeout=60)
            assert reply["content"]["status"] == "ok", reply["content"]
            msg_id = kernel.kc.execute(code)
            while kernel.km.is_alive():
                try:
                    reply = wait_reply(kernel.kc, msg_id, timeout=0.5)
                except TimeoutError:  # no reply yet
                    continue
                content = reply["content"]
                return "works" if content["status"] == "ok" else str(content.get("ename"))
            return "died"
        finally:
            kernel.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", default="1G", help="the cgroup's memory limit (a size: 1G, 512M)")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    limit = parse_size(args.limit, "--limit", allow_zero=False)
    rows: list[tuple[str, str, str]] = []
    with private_kernelspecs(), kernels_cleaned_up():
        for what, needs, code in PROBES:
            if needs is not None and importlib.util.find_spec(needs) is None:
                rows.append((what, f"{needs} not installed", ""))
                continue
            print(f"... {what}", file=sys.stderr, flush=True)
            rows.append(
                (what, in_our_kernel(code, limit, address_limit=False), in_our_kernel(code, limit, address_limit=True))
            )
    print(f"Under a {args.limit} cgroup limit, Python {sys.version.split()[0]}:\n")
    print(markdown_table(["probe", "RLIMIT_DATA (the default)", "RLIMIT_AS"], rows))
    if args.json:
        results = [{"probe": what, "data_limit": ours, "address_limit": address} for what, ours, address in rows]
        write_json(args.json, {"environment": environment(), "limit": limit, "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
