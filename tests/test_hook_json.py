"""The hooks' fast path reads and writes JSON through `_json` without the `json` package; what it
reads and writes must be exactly what `json` would."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from auditor.live import hook_json

PAYLOADS = [
    # what Claude Code, Codex and Gemini CLI send (shapes from docs/live-hooks.md)
    '{"session_id": "4d5611e5", "transcript_path": "/home/u/.claude/projects/p/4d5611e5.jsonl", '
    '"cwd": "/home/u/p", "hook_event_name": "PostToolUse", "tool_name": "Bash", '
    '"tool_input": {"command": "pytest -q"}, "tool_response": {"stdout": "12 passed\\n", '
    '"stderr": "", "interrupted": false}, "tool_use_id": "toolu_01"}',
    '{"session_id":"s","hook_event_name":"Stop","stop_hook_active":true,'
    '"last_assistant_message":"Done \\u2014 all green \\ud83d\\ude00"}\n',
    ' \n\t{"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "caf\u00e9 \u4e2d"}\r\n',
    # the odd cases: a lone surrogate, big and special numbers, nesting, repeated keys
    '{"a": "\\ud800", "n": 123456789012345678901234567890, "f": 1e-7, "g": -3e400}',
    "[NaN, Infinity, -Infinity, 1.5, -0.0, 0, true, false, null]",
    '{"a": {"b": {"c": [[], {}, [{"d": "\\"\\\\\\n\\t\\u0001"}]]}}, "a": 2}',
    '"just a string"',
    "12",
]
BAD = ["", " ", "{", '{"a": 1} x', '{"a": 1}{}', "[1,]", "{'a': 1}", "\ufeff{}", "nul", '"\x01"']


def same(a, b) -> bool:
    """Equal, NaN included (NaN != NaN)."""
    return json.dumps(a) == json.dumps(b) and not (
        isinstance(a, float) and math.isnan(a) != math.isnan(b)
    )


@pytest.mark.parametrize("text", PAYLOADS)
def test_reads_what_json_reads(text):
    assert same(hook_json.loads(text), json.loads(text))
    as_bytes = text.encode("utf-8", "surrogatepass")
    assert same(hook_json.loads(as_bytes), json.loads(as_bytes))


@pytest.mark.parametrize("text", PAYLOADS)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_writes_what_json_writes(text, ensure_ascii):
    value = json.loads(text)
    assert hook_json.dumps(value, ensure_ascii=ensure_ascii) == json.dumps(
        value, ensure_ascii=ensure_ascii
    )


def test_writes_keys_and_floats_as_json_does():
    value = {"t": 1764250000.123456, "x": 0.1, 7: 2, None: 3, True: 4, 2.5: "k", "s": "\u2028"}
    assert hook_json.dumps(value) == json.dumps(value)
    assert hook_json.dumps(value, ensure_ascii=False) == json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize("text", BAD)
def test_refuses_what_json_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        hook_json.loads(text)


def test_refuses_bad_input_in_a_process_that_never_imported_json():
    # As a hook event runs: the C scanner's own errors need the json package, not loaded yet.
    code = (
        "import sys; from auditor.live import hook_json\n"
        "assert 'json' not in sys.modules\n"
        f"for text in {BAD!r}:\n"
        "    try:\n"
        "        hook_json.loads(text)\n"
        "    except ValueError:\n"
        "        print('refused')\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert ran.stderr == ""
    assert ran.stdout.split() == ["refused"] * len(BAD)


def test_refuses_to_write_what_json_cannot():
    for value in ({"a": object()}, {(1,): 2}, {1, 2}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            hook_json.dumps(value)
