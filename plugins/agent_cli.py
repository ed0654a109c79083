"""Observers through the agent CLIs people are already logged in to: the shared part.

`claude -p`, `codex exec` and `gemini` each judge a checkpoint as a one-shot, non-interactive
run (see `cli_claude`, `cli_codex`, `cli_gemini`). What they share lives here:

- The process: started without a shell (an argument list), in a new process group, with the
  prompt on stdin (then closed: nothing can wait for a keyboard) and its own empty working
  directory; past the call's timeout the whole group is killed (SIGTERM, then SIGKILL), so a
  hung CLI leaves no child behind, and the call fails saying so.
- The answer: the CLI's JSON output is read by the backend into a decision object, which must
  pass the core's check of `course_correct` arguments (`validate`). An answer that does not is
  asked once more, with the problem stated (one repair retry); a second bad answer is returned
  as it is and the core records it as invalid.
- The cost: `claude -p` reports one (recorded as reported); the others report tokens only, which
  the core prices at list price, and the raw answer says `"cost": "estimated"`.
- Whether the CLI is ready: installed (on PATH, or the path in its `AUDITOR_<NAME>_CLI`
  variable) and logged in, found without a model call (a status command or the credential files
  the CLI keeps), remembered for a minute.

Each CLI's own tools are turned off and whatever it may still run is read-only, so an observer
can never change the user's files; its user settings (hooks, MCP servers, extensions) are not
loaded, so an auditor hook installed in that CLI does not fire inside the observer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from auditor.api import (
    TOOL_NAME,
    TOOL_SCHEMA,
    AuditorError,
    ObserveRequest,
    ObserveResult,
    ObserverNeeds,
    ObserverUsage,
    validate,
)

if TYPE_CHECKING:
    import asyncio  # imported where a process runs: every command loads this plugin

KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL of a CLI past its timeout
STATUS_TIMEOUT = 20.0  # seconds a login-status command may take
STATUS_KEPT = 60.0  # seconds a login status is remembered
OUTPUT_LIMIT = 4 << 20  # bytes of a CLI's stdout read at most

# The decision as a strict JSON schema (every key required, nothing else): what `codex exec
# --output-schema` needs, and what the text-only CLIs are asked to write.
DECISION_SCHEMA: dict[str, Any] = {
    **TOOL_SCHEMA,
    "required": ["needsCorrection", "message"],
    "additionalProperties": False,
}
ANSWER_RULE = (
    "Answer with one JSON object and nothing else (no prose, no code fence), matching this JSON "
    f"schema:\n{json.dumps(DECISION_SCHEMA)}\n"
    "needsCorrection: true only if the agent clearly went off track; message: the correction "
    "as the user would write it, or null when there is none."
)


def repair_prompt(user: str, problem: str) -> str:
    """The user content of the one retry after an answer that broke the contract."""
    return f"{user}\n\n---\nYour previous answer could not be used: {problem}. {ANSWER_RULE}"


@dataclass
class Invocation:
    """One run of a CLI: its arguments (no shell), extra environment, and what it reads."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()  # environment variables the child must not see
    stdin: str = ""


@dataclass
class Answer:
    """What a backend read from a CLI's output."""

    decision: Any  # the decision object (None: the CLI gave none)
    usage: ObserverUsage
    model: str
    raw: Any
    error: str | None = None  # the CLI reported a failure (auth, API error...)


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class AgentCli(Protocol):
    """One agent CLI as an observer: how to run it and read it (see `cli_claude`...)."""

    name: str  # the observer's name: claude-cli, codex-cli, gemini-cli
    program: str  # the executable's usual name on PATH
    product: str  # the CLI's name for people: Claude Code...
    install: str  # how to install it
    vendor: str
    rank: int  # among the logged-in CLIs, the lowest is chosen first
    default_model: str

    def invocation(
        self, exe: str, request: ObserveRequest, workdir: Path, options: dict
    ) -> Invocation: ...

    def read(self, done: Finished, request: ObserveRequest) -> Answer: ...

    def login_problem(self, exe: str) -> str | None:
        """None when the CLI can make a model call now, else a one-line reason with the fix."""
        ...


async def run_process(
    argv: list[str], stdin: str, env: dict[str, str], cwd: Path, timeout: float, what: str
) -> Finished:
    """Run `argv` with `stdin`, killing its process group past `timeout` (TimeoutError)."""
    import asyncio

    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(cwd),
        start_new_session=True,  # its own process group, killed as one
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        await _kill_group(proc)
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise TimeoutError(
            f"{what} gave no answer within {timeout:g}s; its process group was killed"
        ) from None
    return Finished(
        proc.returncode if proc.returncode is not None else -1,
        out[:OUTPUT_LIMIT].decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        time.monotonic() - started,
    )


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    import asyncio

    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), wait)
            break
        except TimeoutError:
            continue
    # The leader may be gone while others of its group live on: make sure none does.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def status_output(argv: list[str], env: dict[str, str] | None = None) -> Finished | str:
    """Run a CLI's login-status command (no model call); a string says why it could not."""
    started = time.monotonic()
    try:
        p = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=STATUS_TIMEOUT,
            env=env,
            check=False,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return f"`{' '.join(argv[-3:])}` did not answer within {STATUS_TIMEOUT:g}s"
    except OSError as exc:
        return f"cannot run {argv[0]}: {exc}"
    return Finished(
        p.returncode,
        p.stdout.decode("utf-8", "replace"),
        p.stderr.decode("utf-8", "replace"),
        time.monotonic() - started,
    )


def clean_env(unset: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment a CLI observer runs in: the user's (their login and settings), without
    what would make the CLI believe it runs inside an agent's hook or session."""
    env = dict(os.environ)
    for key in ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CODEX_THREAD_ID", *unset):
        env.pop(key, None)
    env["NO_COLOR"] = "1"
    env["CI"] = env.get("CI", "1")  # no terminal niceties, no update prompts
    return env


class CliObserver:
    """An observer backend that runs an agent CLI once per checkpoint."""

    concurrency = 2  # each call is a Node or Rust process of a few hundred MB
    timeout = 180.0  # a CLI starts up before it calls its model
    seconds_per_call = 15.0

    def __init__(self, cli: AgentCli, clock: Callable[[], float] = time.monotonic):
        self.cli = cli
        self.name = cli.name
        # Ready when `check()` finds the CLI installed and logged in; Google's first (its
        # login has a free tier), see auditor.audit.observer_choice.
        self.needs = ObserverNeeds(vendor=cli.vendor, login=True, rank=cli.rank)
        self.default_model = cli.default_model
        self.description = f"{cli.product} ({cli.program}), logged in; no API key needed"
        self._clock = clock
        self._status: dict[str, tuple[float, str | None]] = {}

    def executable(self, options: dict[str, Any]) -> str | None:
        """The CLI's path: the `command` option, else $AUDITOR_<NAME>_CLI, else PATH."""
        env_name = "AUDITOR_" + self.cli.program.upper() + "_CLI"
        given = options.get("command") or os.environ.get(env_name)
        if given:
            return given if Path(given).is_file() else None
        return shutil.which(self.cli.program)

    def check(self, options: dict[str, Any]) -> str | None:
        """Return None when the CLI is installed and logged in, else what to do."""
        exe = self.executable(options)
        if exe is None:
            env_name = "AUDITOR_" + self.cli.program.upper() + "_CLI"
            return (
                f"The {self.name} observer needs {self.cli.product}: {self.cli.install} "
                f"(or set {env_name} to its path)."
            )
        now = self._clock()
        known = self._status.get(exe)
        if known is None or now - known[0] > STATUS_KEPT:
            known = (now, self.cli.login_problem(exe))
            self._status[exe] = known
        return known[1]

    async def observe(self, request: ObserveRequest, options: dict[str, Any]) -> ObserveResult:
        """Run the CLI; ask once more when its answer breaks the contract."""
        exe = self.executable(options)
        if exe is None:
            raise AuditorError(self.check(options) or f"{self.cli.program} is not installed")
        started = time.perf_counter()
        first = await self._once(exe, request, options)
        problem = _problem(first)
        if problem is None:
            return self._result(first, None, started)
        retry = ObserveRequest(
            request.system,
            repair_prompt(request.user, problem),
            request.model,
            request.temperature,
            request.max_output_tokens,
            request.timeout,
        )
        second = await self._once(exe, retry, options)
        return self._result(second, first, started, problem)

    async def _once(self, exe: str, request: ObserveRequest, options: dict[str, Any]) -> Answer:
        with tempfile.TemporaryDirectory(prefix=f"auditor-{self.name}-") as tmp:
            workdir = Path(tmp)
            inv = self.cli.invocation(exe, request, workdir, options)
            env = clean_env(inv.unset)
            env.update(inv.env)
            run_dir = workdir / "work"
            run_dir.mkdir(exist_ok=True)
            done = await run_process(
                inv.argv, inv.stdin, env, run_dir, request.timeout, f"{self.cli.program}"
            )
            answer = self.cli.read(done, request)
        if answer.error is not None and answer.decision is None:
            raise AuditorError(f"{self.cli.program}: {answer.error}")
        return answer

    def _result(
        self, answer: Answer, first: Answer | None, started: float, problem: str | None = None
    ) -> ObserveResult:
        usage = answer.usage
        raw: dict[str, Any] = {"cli": self.cli.program, "answer": answer.raw}
        if first is not None:  # both calls count: add the first one's tokens and cost
            u, f = usage, first.usage
            usage = ObserverUsage(
                input=u.input + f.input,
                output=u.output + f.output,
                cached=u.cached + f.cached,
                thinking=u.thinking + f.thinking,
                cache_write=u.cache_write + f.cache_write,
                details={**u.details, "repaired": problem},
                cost_usd=None
                if u.cost_usd is None or f.cost_usd is None
                else u.cost_usd + f.cost_usd,
            )
            raw["first_answer"] = first.raw
            raw["repaired"] = problem
        raw["cost"] = "reported by the CLI" if usage.cost_usd is not None else "estimated"
        return ObserveResult(
            tool_name=TOOL_NAME if answer.decision is not None else None,
            arguments=answer.decision,
            usage=usage,
            model=answer.model,
            latency_s=time.perf_counter() - started,
            raw=raw,
        )


def _problem(answer: Answer) -> str | None:
    """What is wrong with an answer's decision, or None when the core will accept it."""
    if answer.decision is None:
        return "it held no JSON object with needsCorrection"
    verdict = validate(ObserveResult(TOOL_NAME, answer.decision, answer.usage, answer.model, 0.0))
    return None if verdict.valid else verdict.problem


def decision_in(text: str | None) -> dict[str, Any] | None:
    """The decision object written in a CLI's text answer (bare, fenced, or among prose)."""
    from .local import json_from_text

    return json_from_text(text)
