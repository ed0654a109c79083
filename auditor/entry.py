"""The `auditor` console script: hook events take the fast path, everything else the CLI."""

from __future__ import annotations

import sys


def main() -> None:
    """Run `auditor`: a hook event (`auditor hook AGENT`) without importing the CLI."""
    from .live.fast_path import split_argv

    if split_argv(sys.argv[1:]) is not None:
        from .live.fast_path import main as hook_event

        hook_event(sys.argv[1:])  # exits
    from .cli.main import main as cli

    cli()
