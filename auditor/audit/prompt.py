"""The observer's system prompt: versioned files shipped with auditor, or the user's own file.

Built-in prompts live in `data/prompts/observer-v<N>.md` (the `auditor_data` package, so they
ship in the wheel). The newest version is the default. `AUDITOR_PROMPT=/path/to/prompt.md`
replaces it with a file of the user's own. The hash is taken over the exact text sent, so a run
can tell whether a verdict was given under the same prompt.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from ..errors import AuditorError, UnknownName

PROMPT_ENV = "AUDITOR_PROMPT"
_FILE_NAME = re.compile(r"observer-v(\d+)\.md")


@dataclass(frozen=True)
class Prompt:
    version: str  # "v1"..., or "file:<path>" for a user's own prompt
    text: str
    sha256: str


def _make(version: str, data: bytes) -> Prompt:
    text = data.decode("utf-8")
    return Prompt(version, text, hashlib.sha256(text.encode("utf-8")).hexdigest())


def _builtin() -> dict[str, Traversable]:
    """Return the shipped prompt files by version, oldest first."""
    folder = resources.files("auditor_data") / "prompts"
    found: list[tuple[int, Traversable]] = []
    if folder.is_dir():
        for entry in folder.iterdir():
            m = _FILE_NAME.fullmatch(entry.name)
            if m:
                found.append((int(m.group(1)), entry))
    return {f"v{n}": entry for n, entry in sorted(found, key=lambda pair: pair[0])}


def available_versions() -> list[str]:
    """Return the versions of the built-in prompt, oldest first."""
    return list(_builtin())


def _from_file(path: Path, origin: str) -> Prompt:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditorError(
            f"{origin} names the prompt file {str(path)!r}, which cannot be read "
            f"({exc.strerror or exc}). Point it at a readable Markdown file, or unset it to use "
            "the built-in prompt."
        ) from None
    if not data.strip():
        raise AuditorError(f"The prompt file {str(path)!r} ({origin}) is empty.")
    try:
        return _make(f"file:{path}", data)
    except UnicodeDecodeError:
        raise AuditorError(f"The prompt file {str(path)!r} ({origin}) is not UTF-8 text.") from None


def load_prompt(version: str | None = None) -> Prompt:
    """Load the observer's system prompt.

    `version` picks a built-in prompt (`"v1"`, `"1"` or `"observer-v1"`) or names a file (any
    value with a path separator or ending in `.md`). Without it, the file named by
    `AUDITOR_PROMPT` is used when that is set, else the newest built-in version.
    """
    if version is None:
        override = os.environ.get(PROMPT_ENV, "").strip()
        if override:
            return _from_file(Path(override).expanduser(), f"${PROMPT_ENV}")
    elif "/" in version or os.sep in version or version.endswith(".md"):
        return _from_file(Path(version).expanduser(), "the prompt option")
    builtin = _builtin()
    if not builtin:
        raise AuditorError(
            "No built-in observer prompt was found; the auditor installation is incomplete."
        )
    if version is None:
        version = next(reversed(builtin))
    key = version.removeprefix("observer-").lower()
    key = key if key.startswith("v") else f"v{key}"
    if key not in builtin:
        raise UnknownName("prompt version", version, list(builtin))
    return _make(key, builtin[key].read_bytes())
