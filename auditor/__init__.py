"""auditor: audit coding-agent transcripts with an observer model from another vendor.

Plugins import what they need from `auditor.api`; `auditor.hookimpl` is the same marker as
`auditor.api.hookimpl`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .hookspecs import hookimpl


def __getattr__(name: str) -> Any:
    # Lazy, so that `auditor hook` (which imports this package) does not import pluggy.
    if name == "hookimpl":
        from .hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'auditor' has no attribute {name!r}")


__all__ = ["__version__", "hookimpl"]
