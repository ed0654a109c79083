"""Files only their owner may read: the store and the live hooks' spool hold transcripts as the
agents wrote them (secrets included), so what an older auditor left readable by others (a store
0644 in a folder 0755) is made the owner's alone when it is next opened.

Standard library only: the worker's start and the store's opening both use it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable


def _tighten(path: str) -> bool:
    """Take the group's and others' bits off `path` when they are set and the file is ours
    (someone else's file, a shared one, is left as its owner made it); True when changed."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(found.st_mode) or found.st_uid != os.geteuid():
        return False
    mode = stat.S_IMODE(found.st_mode)
    if not mode & 0o077:
        return False
    try:
        os.chmod(path, mode & ~0o077)
    except OSError:
        return False
    return True


def tighten(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Make each of `paths` that exists, is ours and is open to others the owner's alone;
    return those changed."""
    return [str(p) for p in paths if _tighten(os.fspath(p))]


def tighten_tree(root: str | os.PathLike) -> int:
    """Make `root` and everything under it the owner's alone; return how many were changed."""
    root = os.fspath(root)
    changed = int(_tighten(root))
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            changed += _tighten(os.path.join(folder, name))
    return changed


def open_to_others(path: str | os.PathLike) -> bool:
    """True when `path` exists and its group or others may read, write or enter it."""
    try:
        return bool(os.stat(path).st_mode & 0o077)
    except OSError:
        return False
