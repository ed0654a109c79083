"""The hooks auditor calls. Plugins implement them with `@auditor.hookimpl`.

Naming: things users choose by name (transcript formats, observers, injectors) are collected
with `register_*(register)` hooks; decisions where one plugin wins are `firstresult` hooks that
return None for "no opinion". Built-in plugins are registered like third-party ones, through
the `auditor` entry-point group, and mark their implementations `trylast=True` so that a user's
plugin wins.
"""

from __future__ import annotations

from typing import Callable

import pluggy

hookspec = pluggy.HookspecMarker("auditor")
hookimpl = pluggy.HookimplMarker("auditor")


@hookspec
def register_formats(register: Callable[[object], None]) -> None:
    """Register transcript formats.

    Called once when the plugin manager is first used. Call `register(fmt)` once per format;
    `fmt` is an object with the attributes and methods of `auditor.model.TranscriptFormat`:
    `name` (what `--format NAME` selects), `agent`, `appendable`, `detect(path, head)` (cheap:
    looks at the path and the first 64 KiB only) and `parse(path, cursor)` (yields records).

    Two plugins registering the same name is an error reported by `auditor plugins`.
    """
