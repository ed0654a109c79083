"""One rule set for shell commands that edit files, whichever agent ran them (issue 11 item 5).

Claude Code's reader counted `git apply`/`patch` and edits of temporary files; Codex's ignored
the first and skipped the second; neither read the other's `apply_patch`. Now one module reads
every agent's commands: Claude Code's `Bash`, Codex's `shell`/`exec_command` argv lists and
`bash -lc` scripts, codex exec's command items, Gemini CLI's `run_shell_command`, Amp's `Bash`.
"""

from __future__ import annotations

import json

import pytest
from auditor_plugins.claude_code_edits import tool_edits
from auditor_plugins.shell_edits import shell_edits
from sqlalchemy import select

from auditor.ingest.ingester import ingest
from auditor.store import schema as s


@pytest.mark.parametrize(
    "command, expected",
    [
        # Written by Claude Code
        ("ls -la 2>/dev/null", (False, None)),
        ("make 2>&1 | tail -5", (False, None)),
        ("echo oops >&2", (False, None)),
        ("echo hi > /dev/null", (False, None)),
        ('grep -r "a > b" src | head', (False, None)),
        ("git commit -m \"$(cat <<'EOF'\nfix: a > b\nEOF\n)\"", (False, None)),
        ("sed -n 's/a/b/p' file.txt", (False, None)),
        ("git log --grep apply", (False, None)),
        ("echo done # > not-a-file", (False, None)),
        ("cat > types/state.ts << 'EOF'\nexport const x = 1 > 0;\nEOF", (True, ["types/state.ts"])),
        (
            "sed -i 's/x/y/' ~/.config/a.conf && sed -i '' -e 's/1/2/' b.txt",
            (True, ["~/.config/a.conf", "b.txt"]),
        ),
        ("perl -pi -e 's/a/b/' one.txt two.txt", (True, ["one.txt", "two.txt"])),
        ("make 2>&1 | tee build.log", (True, ["build.log"])),
        # Redirections passed over before tokenising, beside an edit or inside a word
        ("make 2>&1 > build.log", (True, ["build.log"])),
        ("ls >/dev/null 2>&1 && echo ok >> status.txt", (True, ["status.txt"])),
        ("echo x2>&1y", (True, ["1y"])),
        ("echo hi >/dev/null.d", (False, None)),
        ('echo x >> "my notes.md"', (True, ["my notes.md"])),
        ("git apply fix.patch", (True, None)),
        ("patch -p1 < fix.diff", (True, None)),
        (
            'figlet -f slant "L&S Electric" > ~/.config/omarchy/branding/screensaver.txt',
            (True, ["~/.config/omarchy/branding/screensaver.txt"]),
        ),
        # Written by Codex (argv lists and scripts)
        (["bash", "-lc", "ls -la"], (False, None)),
        (["bash", "-lc", "sed -n '1,200p' src/app.ts"], (False, None)),
        ("git rev-parse --git-dir 2>/dev/null", (False, None)),
        ("npm test > /tmp/out.log 2>&1", (False, None)),
        ("rg foo src | head -20", (False, None)),
        ("echo 'a > b'", (False, None)),
        ("cat <<'EOF' > specs/plan.md\n# Plan > draft\nEOF", (True, ["specs/plan.md"])),
        (
            ["apply_patch", "*** Begin Patch\n*** Add File: a.py\n+x\n*** End Patch\n"],
            (True, ["a.py"]),
        ),
        (
            [
                "bash",
                "-lc",
                "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: b.ts\n*** Move to: c.ts\n@@\n-x\n+y\n*** Delete File: d.ts\n*** End Patch\nPATCH\n",
            ],
            (True, ["b.ts", "c.ts", "d.ts"]),
        ),
        ("sed -i 's/old/new/' a.txt b.txt", (True, ["a.txt", "b.txt"])),
        ("sed -i.bak -e 's/x/y/' conf.ini", (True, ["conf.ini"])),
        ("perl -pi -e 's/x/y/' lib.pl", (True, ["lib.pl"])),
        ("printf 'x\\n' >> notes.md && git add notes.md", (True, ["notes.md"])),
        ("echo done | tee -a CHANGELOG.md", (True, ["CHANGELOG.md"])),
        ("python3 - <<'EOF'\nopen('x.py', 'w').write('y > z')\nEOF", (False, None)),
        # Where the two former rule sets disagreed: one answer now
        ("git apply --check fix.patch", (False, None)),
        (["git", "apply", "fix.patch"], (True, None)),
        ("patch --dry-run -p1 < fix.diff", (False, None)),
        ("curl -s https://example.com > /tmp/page.html", (False, None)),
        ("sort data.csv | tee /tmp/sorted.csv", (False, None)),
        ("sed -i 's/a/b/' /tmp/scratch.txt", (False, None)),
        ("echo x > $TMPDIR/note && echo y > kept.txt", (True, ["kept.txt"])),
        (
            "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n"
            "*** End Patch\nPATCH",
            (True, ["a.py"]),
        ),
        ("echo hi | tee", (False, None)),
    ],
)
def test_shell_edits(command, expected):
    assert shell_edits(command) == expected


SHELL_TOOLS = {"Bash", "shell", "shell_command", "exec_command", "local_shell", "run_shell_command"}


def shell_commands(engine) -> list[tuple[str, str, bool]]:
    """(agent, command script, stored is_file_edit) of every stored shell call."""
    out = []
    with engine.connect() as conn:
        rows = conn.execute(
            select(s.Thread.agent, s.Message.blocks, s.ToolCall.call_id, s.ToolCall.is_file_edit)
            .join(
                s.Message,
                (s.Message.thread_id == s.ToolCall.thread_id)
                & (s.Message.native_id == s.ToolCall.call_message_id),
            )
            .join(s.Thread, s.Thread.id == s.ToolCall.thread_id)
            .where(s.ToolCall.name.in_(SHELL_TOOLS))
        ).all()
    for agent, blocks, call_id, stored in rows:
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        for b in blocks:
            if b.get("kind") != "tool_use" or b.get("tool_use_id") != call_id:
                continue
            args = b.get("tool_input")
            command = args.get("command") or args.get("cmd") if isinstance(args, dict) else args
            if isinstance(command, list) and command[:1] in (["bash"], ["zsh"], ["sh"]):
                command = command[2] if len(command) == 3 else None
            if isinstance(command, str):
                out.append((agent, command, bool(stored)))
    return out


@pytest.mark.corpus
def test_both_agents_real_commands_read_by_one_rule(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / "claude-code", corpus / "codex", corpus / "gemini-cli"])
    commands = shell_commands(engine)
    by_agent: dict[str, list[bool]] = {}
    for agent, command, stored in commands:
        # What was stored is the one rule's answer, and a command reads the same as a Claude
        # Code Bash call and as a Codex `bash -lc` argv.
        assert stored == shell_edits(command)[0], (agent, command[:200])
        assert tool_edits("Bash", {"command": command}) == shell_edits(["bash", "-lc", command])
        by_agent.setdefault(agent, []).append(stored)
    counts = {agent: (sum(flags), len(flags)) for agent, flags in by_agent.items()}
    # (edits, shell commands): Codex's `apply_patch` heredocs (29 of its 97) went unseen by
    # Claude Code's former reader; Gemini CLI's one (`python pack_files.py > packed.json`) by all.
    assert counts == {"claude-code": (11, 687), "codex": (97, 715), "gemini-cli": (1, 62)}
