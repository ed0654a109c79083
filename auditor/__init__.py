"""auditor: audit coding-agent transcripts with an observer model from another vendor.

Plugins import what they need from `auditor.api`; `auditor.hookimpl` is the same marker as
`auditor.api.hookimpl`.
"""

from __future__ import annotations

__version__ = "0.1.0"

# Not `typing.TYPE_CHECKING`: every hook event imports this package, and `typing` (with the
# `re` it imports) would be a third of the hook's own cost. Type checkers read the name alike.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .hookspecs import hookimpl


def __getattr__(name: str) -> Any:
    # Lazy, so that `auditor hook` (which imports this package) does not import pluggy.
    if name == "hookimpl":
        from .hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'auditor' has no attribute {name!r}")


__all__ = ["__version__", "hookimpl"]
