"""Writing files that other programs read while we write them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_atomically(
    path: Path, data: bytes, unchanged_since: os.stat_result | None = None
) -> bool:
    """Replace `path` by `data` so that readers see the old or the new file, never a mix.

    Write a temporary file beside it, fsync it, rename it over `path`, fsync the directory.
    A symbolic link is written through: the file it points to is replaced and the link stays
    (dotfile repositories link settings and thread files). Return False, leaving `path` alone,
    when it changed after `unchanged_since` (someone else wrote it meanwhile: read it again and
    retry).
    """
    path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".auditor-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            view = memoryview(data)
            for start in range(0, len(data), 1 << 20):
                fh.write(view[start : start + (1 << 20)])
            fh.flush()
            os.fsync(fh.fileno())
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:  # a new file gets the usual permissions, not mkstemp's 0600
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        if unchanged_since is not None:
            now = path.stat()
            if (now.st_mtime_ns, now.st_size) != (
                unchanged_since.st_mtime_ns,
                unchanged_since.st_size,
            ):
                os.unlink(tmp)
                return False
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True
