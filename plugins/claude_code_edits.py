"""Which Claude Code tool calls change files, and which files.

Structured edit tools (`Edit`, `Write`, `MultiEdit`, `NotebookEdit`, file-writing MCP tools) name
their file in the input. `Bash` commands are read by `shell_edits`, the one rule set for every
agent's shell commands.
"""

from __future__ import annotations

from typing import Any

from .shell_edits import MAX_PATHS, shell_edits

# Tool name -> input key naming the edited file.
EDIT_TOOLS = {
    "Edit": "file_path",
    "Write": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
# MCP tools (mcp__<server>__<tool>) whose tool part writes files.
MCP_EDIT_TOOLS = ("create_or_update_file", "push_files", "write_file", "edit_file", "create_file")


def tool_edits(name: str | None, tool_input: Any) -> tuple[bool, list[str] | None]:
    """Return (is_file_edit, edited paths or None) for one tool call."""
    if not isinstance(name, str) or not isinstance(tool_input, dict):
        return False, None
    key = EDIT_TOOLS.get(name)
    if key is not None:
        path = tool_input.get(key)
        return True, [path] if isinstance(path, str) and path else None
    if name == "Bash":
        command = tool_input.get("command")
        if isinstance(command, str):
            return shell_edits(command)
        return False, None
    if name.startswith("mcp__") and name.rsplit("__", 1)[-1] in MCP_EDIT_TOOLS:
        paths = []
        path = tool_input.get("path") or tool_input.get("file_path")
        if isinstance(path, str) and path:
            paths.append(path)
        files = tool_input.get("files")
        if isinstance(files, list):
            paths.extend(
                f["path"] for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)
            )
        return True, paths[:MAX_PATHS] or None
    return False, None
