"""Hooks of one session can fire at once (parallel tool calls, a new prompt while a Stop hook
still runs), each appending its event to the spool. A long event is written page by page, so a
hook that looked at the file mid-write saw a line without its end, took it for one a crash cut
short, and ended it again: an empty line in the spool. Appenders now hold the file's lock."""

from __future__ import annotations

import multiprocessing

from auditor.live import fast_path as live


def append_many(path: str, letter: int, times: int) -> None:
    line = b'{"tool_response": "' + bytes([letter]) * 20_000 + b'"}\n'  # five pages long
    for _ in range(times):
        live._append(path, line)


def test_hooks_appending_at_once_leave_whole_lines_and_no_empty_ones(tmp_path):
    path = str(tmp_path / live.EVENTS)
    hooks = [
        multiprocessing.get_context("fork").Process(target=append_many, args=(path, 97 + k, 150))
        for k in range(4)
    ]
    for hook in hooks:
        hook.start()
    for hook in hooks:
        hook.join(120)
    lines = (tmp_path / live.EVENTS).read_bytes().split(b"\n")
    assert lines.pop() == b""  # the file ends with its last line's end
    assert len(lines) == 600
    assert all(len(line) == 20_021 and len(set(line[19:-2])) == 1 for line in lines)


def test_a_line_a_crash_cut_short_is_ended_before_the_next(tmp_path):
    path = tmp_path / live.EVENTS
    path.write_bytes(b'{"hook_event_name": "Stop"}\n{"hook_event_na')  # cut short
    offset = live._append(str(path), b'{"hook_event_name": "UserPromptSubmit"}\n')
    assert path.read_bytes().split(b"\n")[1:] == [
        b'{"hook_event_na',
        b'{"hook_event_name": "UserPromptSubmit"}',
        b"",
    ]
    assert offset == len(b'{"hook_event_name": "Stop"}\n{"hook_event_na\n')
