"""`python -m cancelkernel` is the `cancelkernel` command."""

from .cli import main

raise SystemExit(main())
