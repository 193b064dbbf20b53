"""Unit tests: the ipykernel / IPython internals we copy or override have not changed under us.

When one fails after an upgrade: read the new original, port its changes into
cancelkernel/kernel/upstream.py, and add the new version's hash to REVIEWED.
"""

from __future__ import annotations

import pytest

from cancelkernel.kernel.upstream import REVIEWED, source_hash


@pytest.mark.parametrize("qualified", sorted(REVIEWED))
def test_the_original_is_one_we_reviewed(qualified: str) -> None:
    version, digest = source_hash(qualified)
    reviewed = REVIEWED[qualified]
    assert digest in reviewed.values(), (
        f"{qualified} in version {version} (source hash {digest}) is not one we reviewed "
        f"(reviewed: {reviewed}); re-read it, update kernel/upstream.py, then add {{{version!r}: {digest!r}}}"
    )
