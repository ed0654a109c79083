"""Guidance: the CLAUDE.md / AGENTS.md an agent was given, found on disk and in its own reads."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from auditor.audit.checkpoint_plan import CheckpointPlanner
from auditor.cli.main import cli
from auditor.ingest.guidance import DISK, READ, discover, for_checkpoint, read_by_call, store
from auditor.ingest.ingester import ingest
from auditor.store import schema as s
from auditor.store.threads import find_thread, load_messages

DEEP_MANIFEST = "claude-code/daaain-claude-code-log/-src-deep-manifest/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"
DEMO = "claude-code/d-kimuson-claude-code-viewer/sample-project/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
CODEX = "codex/jnarowski-agentcmd/sessions/rollout-2025-09-25T09-49-46-01998190-fba6-7f40-9309-dc4e48c5844a.jsonl"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def found(cwd, agent="claude-code") -> list[tuple[str, str]]:
    """(path relative to the test's tmp dir, first line) of each file found, in order."""
    root = Path(os.environ["HOME"]).parent
    return [(os.path.relpath(g.path, root), g.text.splitlines()[0]) for g in discover(cwd, agent)]


# -- discovery on disk ------------------------------------------------------------------------
def test_from_the_users_file_down_through_the_repository_to_the_working_directory(tmp_path):
    home = Path(os.environ["HOME"])
    write(home / ".claude" / "CLAUDE.md", "user: answer in English")
    write(tmp_path / "CLAUDE.md", "above the repository: not the agent's")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / "AGENTS.md", "repo agents: run make check")
    write(repo / "CLAUDE.md", "repo claude: never push")
    write(repo / "pkg" / ".claude" / "CLAUDE.md", "pkg dot-claude")
    write(repo / "pkg" / "CLAUDE.local.md", "pkg local")
    write(repo / "pkg" / "sub" / "CLAUDE.md", "sub claude")
    write(repo / "pkg" / "sub" / "README.md", "not guidance")
    assert found(repo / "pkg" / "sub") == [
        ("home/.claude/CLAUDE.md", "user: answer in English"),
        ("repo/CLAUDE.md", "repo claude: never push"),
        ("repo/AGENTS.md", "repo agents: run make check"),
        ("repo/pkg/.claude/CLAUDE.md", "pkg dot-claude"),
        ("repo/pkg/CLAUDE.local.md", "pkg local"),
        ("repo/pkg/sub/CLAUDE.md", "sub claude"),
    ]


def test_a_worktree_whose_git_is_a_file_is_a_repository_root(tmp_path):
    write(tmp_path / "AGENTS.md", "outside")
    write(tmp_path / "wt" / ".git", "gitdir: /elsewhere/.git/worktrees/wt")
    write(tmp_path / "wt" / "AGENTS.md", "inside")
    (tmp_path / "wt" / "src").mkdir()
    assert found(tmp_path / "wt" / "src") == [("wt/AGENTS.md", "inside")]


def test_outside_a_repository_the_walk_stops_at_home(tmp_path):
    home = Path(os.environ["HOME"])
    write(tmp_path / "CLAUDE.md", "above home")
    write(home / "CLAUDE.md", "home")
    write(home / "notes" / "AGENTS.md", "notes")
    (home / "notes" / "today").mkdir()
    assert found(home / "notes" / "today") == [
        ("home/CLAUDE.md", "home"),
        ("home/notes/AGENTS.md", "notes"),
    ]


def test_codex_gets_its_own_user_file_and_not_claudes(tmp_path):
    home = Path(os.environ["HOME"])
    write(home / ".claude" / "CLAUDE.md", "claude user file")
    write(home / ".codex" / "AGENTS.md", "codex user file")
    (tmp_path / "p" / ".git").mkdir(parents=True)
    assert found(tmp_path / "p", agent="codex") == [("home/.codex/AGENTS.md", "codex user file")]


def test_imports_of_a_claude_file_are_followed_but_not_from_code(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(
        repo / "CLAUDE.md",
        "# Rules\n@AGENTS.md and @docs/style.md\nmail me@example.md\n"
        "```\n@docs/example.md\n```\nsee `@docs/inline.md`\n",
    )
    write(repo / "AGENTS.md", "agents\n@CLAUDE.md")  # AGENTS.md imports nothing; no loop either way
    write(repo / "docs" / "style.md", "style: @more.md")
    write(repo / "docs" / "more.md", "more")
    for name in ("example.md", "inline.md", "../example.md"):
        write(repo / "docs" / name, "never imported")
    assert [p for p, _ in found(repo)] == ["repo/CLAUDE.md", "repo/AGENTS.md", "repo/docs/style.md"]


def test_no_directory_no_guidance(tmp_path):
    assert (
        discover(None) == []
        and discover("relative/dir") == []
        and discover(tmp_path / "gone") == []
    )


# -- what the agent read itself ---------------------------------------------------------------
def test_a_read_tool_result_loses_line_numbers_and_reminders():
    result = "     1→# Rules\n     2→\n     3→Never push.\n\n<system-reminder>\nmalware note\n</system-reminder>\n"
    assert read_by_call("Read", {"file_path": "/r/CLAUDE.md"}, result) == (
        "/r/CLAUDE.md",
        "# Rules\n\nNever push.",
    )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["bash", "-lc", "sed -n '1,200p' AGENTS.md"], ("/w/AGENTS.md", "Use pnpm.")),
        ("cat ./docs/../AGENTS.md", ("/w/AGENTS.md", "Use pnpm.")),
        ("head -n 50 /x/CLAUDE.local.md", ("/x/CLAUDE.local.md", "Use pnpm.")),
        ("cat AGENTS.md | head", None),  # a pipeline prints something else
        ("cat AGENTS.md README.md", None),  # two files mixed
        ("grep -n pnpm AGENTS.md", None),  # a search, not the file
        ("cat README.md", None),
        ("sed -i 's/a/b/' AGENTS.md", None),
    ],
)
def test_a_shell_command_that_prints_one_guidance_file(command, expected):
    assert read_by_call("shell", {"command": command, "workdir": "/w"}, "Use pnpm.") == expected


def test_a_shell_result_header_is_not_part_of_the_file():
    result = "Exit code: 0\nWall time: 0.1 seconds\nOutput:\n# Rules\nUse pnpm.\n"
    assert read_by_call("shell_command", {"command": "cat AGENTS.md"}, result, cwd="/w") == (
        "/w/AGENTS.md",
        "# Rules\nUse pnpm.",
    )


@pytest.mark.corpus
def test_the_agents_own_read_of_claude_md_is_shown_from_that_point_on(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / DEEP_MANIFEST])
    thread = find_thread(engine, "a7da6a22-facc-4fcd-8bab-f83c87862004")
    with engine.connect() as conn:
        [row] = conn.execute(
            select(s.GuidanceFile).where(s.GuidanceFile.thread_id == thread.id)
        ).all()
    assert (row.path, row.origin, row.message_native_id) == (
        "/src/deep-manifest/CLAUDE.md",
        READ,
        "da722914-e20e-4eb3-964a-211a73fb9b72",
    )
    assert row.text.startswith("# Claude Code Instructions\n\n@AGENTS.md\n")
    assert "→" not in row.text and "system-reminder" not in row.text
    assert row.sha256 == hashlib.sha256(row.text.encode()).hexdigest()
    assert row.read_at.year == 2025  # when the agent read it: the result's own time

    # In the prompt of the turn that read it, apart from the conversation...
    out = CliRunner().invoke(
        cli, ["prompt", thread.native_id, "--at", "331491a8-a632-4b13-95c2-65c29b2a71be"]
    )
    assert out.exit_code == 0, out.output
    user = out.output.split("=== user ===", 1)[1]
    head = user.split("## Conversation", 1)[0]
    assert (
        '<file name="/src/deep-manifest/CLAUDE.md" source="read by the agent with a tool call">'
        in head
    )
    assert "> - Be careful with path handling - use Path objects consistently" in head
    # ...and not before the agent had read it.
    messages = load_messages(engine, thread.id)
    before = [m for m in messages if m.seq < 25]
    with engine.connect() as conn:
        assert for_checkpoint(conn, thread, before).guidance_files == ()
        assert [g.path for g in for_checkpoint(conn, thread, messages).guidance_files] == [
            "/src/deep-manifest/CLAUDE.md"
        ]


@pytest.mark.corpus
@pytest.mark.both_stores
def test_a_read_whose_result_comes_in_a_later_ingest_is_found_then(
    corpus, tmp_path, engine, plugins
):
    # A live session: the Read call is ingested first, its result only when the file grows.
    # The second ingest must look at the earlier call's text again, not only at its own rows.
    lines = (corpus / DEEP_MANIFEST).read_bytes().splitlines(keepends=True)
    result_line = next(i for i, ln in enumerate(lines) if b'"uuid":"da722914-e20e' in ln)
    copy = tmp_path / "a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl"
    copy.write_bytes(b"".join(lines[:result_line]))
    ingest(engine, plugins, [copy])
    thread = find_thread(engine, "a7da6a22-facc-4fcd-8bab-f83c87862004")
    guidance = select(s.GuidanceFile).where(s.GuidanceFile.thread_id == thread.id)
    with engine.connect() as conn:
        assert conn.execute(guidance).all() == []

    copy.write_bytes(b"".join(lines))
    ingest(engine, plugins, [copy])
    with engine.connect() as conn:
        [row] = conn.execute(guidance).all()
    assert (row.path, row.origin, row.message_native_id) == (
        "/src/deep-manifest/CLAUDE.md",
        READ,
        "da722914-e20e-4eb3-964a-211a73fb9b72",
    )
    assert row.text.startswith("# Claude Code Instructions\n\n@AGENTS.md\n")


@pytest.mark.corpus
def test_a_file_the_agent_had_changed_before_reading_is_not_guidance(corpus, engine, plugins):
    # The agent edits /path/to/Demo/CLAUDE.md, then reads it back: its own work.
    ingest(engine, plugins, [corpus / DEMO])
    with engine.connect() as conn:
        assert conn.execute(select(s.GuidanceFile)).all() == []


@pytest.mark.corpus
def test_codex_reading_claude_md_with_sed_in_its_workdir(corpus, engine, plugins):
    ingest(engine, plugins, [corpus / CODEX])
    with engine.connect() as conn:
        [row] = conn.execute(select(s.GuidanceFile)).all()
    assert row.path == "/Users/jnarowski/Dev/spectora/src/spectora-labs-monorepo-v2/CLAUDE.md"
    assert (
        row.text.startswith("# Turborepo Monorepo - Project Overview\n")
        and "Exit code" not in row.text
    )


# -- kept with its hash, a version per change -------------------------------------------------
def test_each_version_is_kept_once_and_the_checkpoint_sees_the_one_read_by_then(
    tmp_path, engine, plugins
):
    from datetime import UTC, datetime, timedelta

    from auditor.store.threads import GuidanceText

    with engine.begin() as conn:
        thread_id = conn.execute(
            s.Thread.__table__.insert().values(
                agent="claude-code",
                native_id="t1",
                is_sidechain=False,
                cwd=str(tmp_path),
                message_count=0,
                tool_call_count=0,
                file_edit_count=0,
            )
        ).inserted_primary_key[0]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    v1 = GuidanceText("/r/CLAUDE.md", "Use tabs.", DISK, t0)
    v2 = GuidanceText("/r/CLAUDE.md", "Use spaces.", DISK, t0 + timedelta(hours=2))
    with engine.begin() as conn:
        assert store(conn, thread_id, [v1, v1]) == 2
        store(conn, thread_id, [v1, v2])
        rows = conn.execute(select(s.GuidanceFile.text, s.GuidanceFile.sha256)).all()
    assert rows == [("Use tabs.", v1.sha256), ("Use spaces.", v2.sha256)]

    class At:  # a message stored at a time
        def __init__(self, when):
            self.native_id, self.timestamp = "m", when

    with engine.connect() as conn:
        thread = find_thread(engine, "t1")
        assert [
            g.text
            for g in for_checkpoint(conn, thread, [At(t0 + timedelta(hours=1))]).guidance_files
        ] == ["Use tabs."]
        assert [
            g.text
            for g in for_checkpoint(conn, thread, [At(t0 + timedelta(hours=3))]).guidance_files
        ] == ["Use spaces."]


def test_ingest_reads_the_files_of_a_working_directory_that_exists(tmp_path, engine, plugins):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / "CLAUDE.md", "Run `make check` before you say done.")
    record = {
        "type": "user",
        "uuid": "u1",
        "sessionId": "s1",
        "cwd": str(project),
        "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "user", "content": "hi"},
    }
    session = write(tmp_path / "s.jsonl", json.dumps(record) + "\n")
    ingest(engine, plugins, [session])
    ingest(engine, plugins, [session])  # unchanged: nothing new
    with engine.connect() as conn:
        rows = conn.execute(
            select(s.GuidanceFile.path, s.GuidanceFile.origin, s.GuidanceFile.text)
        ).all()
    assert rows == [(str(project / "CLAUDE.md"), DISK, "Run `make check` before you say done.")]


# -- on the wire: the hook sends the CLAUDE.md of the session's directory ----------------------
@pytest.mark.corpus
def test_the_hooks_request_to_the_observer_carries_the_claude_md_of_its_directory(corpus, tmp_path):
    from helpers.live import CC_SESSION, CORRECTION, copy_lines, run_cli
    from helpers.wire import Reply, Stub, anthropic_response

    from auditor.store.db import open_db

    project = tmp_path / "Demo"
    (project / ".git").mkdir(parents=True)
    rule = "Never write CLAUDE.md without asking first; run `pnpm test` before you say done."
    secret = "AKIA" + "Q3EGRZ7KXV2B4NHT"
    write(project / "CLAUDE.md", f"# Demo rules\n\n{rule}\nDeploy key: {secret}\n")
    write(Path(os.environ["HOME"]) / ".claude" / "CLAUDE.md", "Answer in short sentences.")
    session = copy_lines(
        corpus / CC_SESSION,
        tmp_path / "projects" / "-Demo" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
    )
    payload = {
        "session_id": "1af7fc5e-8455-4414-9ccd-011d40f70b2a",
        "transcript_path": str(session),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    stub = Stub(Reply(200, anthropic_response({"needsCorrection": True, "message": CORRECTION})))
    try:
        result = run_cli(
            "hook",
            "claude-code",
            "--sync",
            "--observer",
            "claude",
            "--base-url",
            stub.url,
            "--max-retries",
            "0",
            "--deadline",  # none a loaded machine reaches
            "150",
            stdin=json.dumps(payload),
            env={"ANTHROPIC_API_KEY": "sk-ant-TEST-dummy"},
            timeout=180,
        )
        assert result.returncode == 0 and json.loads(result.stdout)["decision"] == "block", (
            result.stderr
        )
        [request] = stub.log
    finally:
        stub.close()
    sent = request["body"]["messages"][0]["content"]
    sent = sent if isinstance(sent, str) else "".join(b.get("text", "") for b in sent)
    guidance = sent.split("## Conversation", 1)[0]
    assert f'<file name="{project}/CLAUDE.md" source="on disk, read ' in guidance
    assert f"> {rule}" in guidance and "> Answer in short sentences." in guidance
    assert secret not in json.dumps(request["body"])  # redacted like the rest of the prompt
    with open_db(tmp_path / "auditor.db").connect() as conn:
        rows = conn.execute(
            select(s.GuidanceFile.path, s.GuidanceFile.origin, s.GuidanceFile.sha256)
        ).all()
    on_disk = (project / "CLAUDE.md").read_bytes()
    assert (str(project / "CLAUDE.md"), DISK, hashlib.sha256(on_disk).hexdigest()) in rows


# -- as the formats carry them ----------------------------------------------------------------
def test_claude_codes_nested_memory_of_an_agents_md_is_guidance(tmp_path, engine, plugins):
    base = {"sessionId": "s2", "cwd": "/repo", "timestamp": "2026-01-01T00:00:00Z"}
    lines = [
        {
            **base,
            "type": "user",
            "uuid": "u1",
            "message": {"role": "user", "content": "fix the parser"},
        },
        {
            **base,
            "type": "attachment",
            "uuid": "a1",
            "parentUuid": "u1",
            "attachment": {
                "type": "nested_memory",
                "path": "/repo/parser/AGENTS.md",
                "content": {
                    "path": "/repo/parser/AGENTS.md",
                    "type": "Project",
                    "content": "Parser changes need a fixture in tests/fixtures.",
                },
            },
        },
    ]
    session = write(tmp_path / "s2.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    ingest(engine, plugins, [session])
    thread = find_thread(engine, "s2")
    assert thread.guidance == {
        "/repo/parser/AGENTS.md": "Parser changes need a fixture in tests/fixtures."
    }
    with engine.connect() as conn:
        view = for_checkpoint(conn, thread, load_messages(engine, thread.id))
    assert [(g.path, g.source) for g in view.guidance_files] == [
        ("/repo/parser/AGENTS.md", "recorded in the transcript")
    ]


def test_amps_discovered_guidance_files_with_their_text_or_read_from_disk(
    tmp_path, engine, plugins
):
    root = Path(__file__).resolve().parent.parent
    doc = json.loads((root / "data" / "samples" / "amp-thread-export.json").read_text())
    sub = write(tmp_path / "repo" / "web" / "AGENTS.md", "Use the design tokens; no raw colours.")
    doc["messages"][0]["discoveredGuidanceFiles"] = [
        {
            "uri": "file:///home/dev/textkit/AGENTS.md",
            "lineCount": 1,
            "content": "Run `just test` first.",
        },
    ]
    result = next(
        b for m in doc["messages"] for b in m["content"] if b.get("type") == "tool_result"
    )
    result["run"].setdefault("result", {})["discoveredGuidanceFiles"] = [
        {"uri": sub.as_uri(), "lineCount": 1},
        {"uri": "file:///gone/AGENTS.md", "lineCount": 3},
    ]
    path = write(tmp_path / "T-amp.json", json.dumps(doc))
    ingest(engine, plugins, [path])
    thread = find_thread(engine, doc["id"])
    assert thread.guidance == {"/home/dev/textkit/AGENTS.md": "Run `just test` first."}
    with engine.connect() as conn:
        view = for_checkpoint(conn, thread, load_messages(engine, thread.id))
    assert [(g.path, g.origin, g.text) for g in view.guidance_files] == [
        ("/home/dev/textkit/AGENTS.md", "transcript", "Run `just test` first."),
        (str(sub), DISK, "Use the design tokens; no raw colours."),
    ]


# -- as the agent had it: the repository's history at the session's start ----------------------
def git(repo: Path, *args: str, when: str | None = None) -> None:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    if when:
        env |= {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def repository(tmp_path) -> Path:
    """A real repository whose rules changed after a session that started on 2026-02-01."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "CLAUDE.md", "Use tabs.")
    git(repo, "add", "CLAUDE.md")
    git(repo, "commit", "-q", "-m", "rules", when="2026-01-01T00:00:00+00:00")
    write(repo / "CLAUDE.md", "Use spaces.")
    write(repo / "AGENTS.md", "Run make lint.")
    git(repo, "add", "CLAUDE.md", "AGENTS.md")
    git(repo, "commit", "-q", "-m", "new rules", when="2026-03-01T00:00:00+00:00")
    write(repo / "CLAUDE.md", "Use spaces. Never push.")  # today's, not even committed
    write(repo / "CLAUDE.local.md", "My own notes.")  # never tracked
    return repo


def test_a_repositorys_rules_are_taken_as_committed_when_the_session_started(repository):
    from datetime import UTC, datetime

    from auditor.store.threads import GIT

    started = datetime(2026, 2, 1, tzinfo=UTC)
    files = {
        os.path.basename(g.path): g for g in discover(repository, "claude-code", as_of=started)
    }
    assert set(files) == {"CLAUDE.md", "CLAUDE.local.md"}  # AGENTS.md came a month later
    assert (files["CLAUDE.md"].text, files["CLAUDE.md"].origin) == ("Use tabs.", GIT)
    assert files["CLAUDE.md"].source == (
        "the repository's version when the session started (committed on 2026-01-01 00:00 UTC)"
    )
    assert (files["CLAUDE.local.md"].text, files["CLAUDE.local.md"].origin) == (
        "My own notes.",
        DISK,
    )
    # Without a session start (a live hook, where now is the session's time): today's files.
    today = {os.path.basename(g.path): g.text for g in discover(repository, "claude-code")}
    assert today["CLAUDE.md"] == "Use spaces. Never push." and "AGENTS.md" in today


def test_the_prompt_of_an_old_session_shows_its_rules_and_says_which_are_todays(
    repository, engine, plugins
):
    from auditor.audit.checkpoints import checkpoint_at

    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "indent the file"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "message": {
                "id": "m1",
                "role": "assistant",
                "model": "claude-x",
                "content": [{"type": "text", "text": "Done, indented with tabs."}],
            },
        },
    ]
    records = [
        {"sessionId": "s1", "cwd": str(repository), "timestamp": "2026-02-01T10:00:00Z", **r}
        for r in lines
    ]
    session = write(repository.parent / "s1.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    ingest(engine, plugins, [session])
    thread = find_thread(engine, "s1")
    messages = load_messages(engine, thread.id)
    with engine.connect() as conn:
        view = for_checkpoint(conn, thread, messages)
    cp = checkpoint_at(thread.id, messages, "a1")
    prompt = CheckpointPlanner(plugins).render(cp, view, messages)
    assert "> Use tabs." in prompt and "Use spaces" not in prompt and "Run make lint" not in prompt
    local = next(line for line in prompt.splitlines() if "CLAUDE.local.md" in line)
    assert "read after this moment, so the agent may have had another version" in local
