"""User-role texts an agent's client writes itself: how to tell them from what the user typed.

Claude Code puts some messages in the user's place that nobody typed: a background task's
`<task-notification>` (a finished shell command or subagent, or the message an `asyncRewake`
Stop hook woke Claude with), reminders, a slash command's caveat and output. Two readers need
to know them: the transcript parser, which labels such a message meta or command instead of
typed (`auditor_plugins.claude_code_content`), and the live hook, which must not take a
`UserPromptSubmit` carrying one for the user writing (it would cancel the audits under way,
take back the corrections waiting and let the next audit run right after a correction). Both
read the markers here. Standard library only: the hook's fast path imports this module.
"""

from __future__ import annotations

# Claude Code: leading markers of user text that a command wrote (a slash command the user
# ran, a `!` shell escape, their output).
CLAUDE_CODE_COMMAND_PREFIXES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
)
# Claude Code: leading markers of user text the client wrote on its own.
CLAUDE_CODE_META_PREFIXES = (
    "<local-command-caveat>",
    "Caveat: The messages below were generated",
    "<system-reminder>",
    "<task-notification>",
    "<user-prompt-submit-hook>",
)
CLAUDE_CODE_INTERRUPT_PREFIX = "[Request interrupted by user"
CLAUDE_CODE_HOOK_FEEDBACK_PREFIXES = ("Stop hook feedback:", "SubagentStop hook feedback:")

# agent -> the leading markers of a prompt its client submits without the user
CLIENT_PROMPTS = {"claude-code": CLAUDE_CODE_META_PREFIXES + CLAUDE_CODE_HOOK_FEEDBACK_PREFIXES}


def written_by_client(agent: str, prompt: str) -> bool:
    """True when `prompt` (a UserPromptSubmit's text) was written by `agent`'s client, not typed."""
    return prompt.lstrip().startswith(CLIENT_PROMPTS.get(agent, ()))
