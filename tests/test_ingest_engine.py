"""The ingest engine on a toy JSONL format: incremental reads and bad input.

The real formats have their own tests; these pin down what every format gets from the engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import func, select

from auditor.hookspecs import hookimpl
from auditor.ingest.ingester import ingest
from auditor.ingest.transcript_files import iter_files
from auditor.model import Block, Message, ThreadInfo, Usage
from auditor.plugins import get_plugin_manager
from auditor.store import schema as s
from auditor.transcript_reading import read_jsonl

pytestmark = pytest.mark.both_stores


class ToyFormat:
    """Lines of {"thread": ..., "id": ..., "text": ..., "tokens": n}."""

    name, agent, appendable = "toy", "toy", True

    def detect(self, path: Path, head: bytes) -> bool:
        return path.suffix == ".jsonl" and head.startswith(b'{"thread"')

    def parse(self, path, cursor):
        for item in read_jsonl(path, cursor):
            if not isinstance(item, tuple):
                yield item
                continue
            line, obj = item
            yield ThreadInfo(obj["thread"], "toy", cwd="/work/toy")
            yield Message(
                obj["thread"],
                obj["id"],
                "user",
                seq=line,
                line=line,
                blocks=[Block("text", text=obj["text"])],
                usage_key=obj["id"],
            )
            yield Usage(obj["thread"], obj["id"], model="toy-1", input_tokens=obj.get("tokens", 0))


class ToyPlugin:
    @hookimpl
    def register_formats(self, register):
        register(ToyFormat())


@pytest.fixture
def toy():
    return get_plugin_manager(extra=[ToyPlugin()])


def lines(*ids: str, thread: str = "t1") -> str:
    return "".join(
        json.dumps({"thread": thread, "id": i, "text": f"message {i}", "tokens": 10}) + "\n"
        for i in ids
    )


def counts(engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return (
            conn.scalar(select(func.count()).select_from(s.Thread)),
            conn.scalar(select(func.count()).select_from(s.Message)),
            conn.scalar(select(func.coalesce(func.sum(s.TokenUsage.input_tokens), 0))),
        )


def errors(engine) -> list[tuple[str, int | None, str]]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                select(s.IngestError.path, s.IngestError.line, s.IngestError.error)
            )
        ]


def test_ingest_twice_changes_nothing(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2", "m3"))
    first = ingest(engine, toy, [tmp_path])
    assert (first.new, first.messages) == (1, 3)
    second = ingest(engine, toy, [tmp_path])
    assert (second.skipped, second.messages) == (1, 0)
    assert counts(engine) == (1, 3, 30)


def test_the_same_path_on_two_machines_is_two_files(engine, toy, tmp_path, monkeypatch):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2", "m3"))
    assert ingest(engine, toy, [f], source="laptop-a").new == 1
    monkeypatch.setenv("AUDITOR_SOURCE", "laptop-b")
    assert ingest(engine, toy, [f]).new == 1  # another machine's file, though the same path
    assert ingest(engine, toy, [f], source="laptop-a").skipped == 1
    with engine.connect() as conn:
        files = conn.execute(select(s.SourceFile.source, s.SourceFile.path)).all()
    assert sorted(files) == [("laptop-a", str(f)), ("laptop-b", str(f))]
    assert counts(engine) == (1, 3, 30)  # the same messages: stored once


def test_messages_another_machine_already_gave_are_not_counted_as_added(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2", "m3"))
    first = ingest(engine, toy, [f], source="laptop-a")
    assert (first.messages, first.threads, first.known) == (3, 1, 0)
    again = ingest(engine, toy, [f], source="laptop-b")  # the same transcript, copied over
    assert (again.new, again.messages, again.threads, again.known) == (1, 0, 0, 3)
    f.write_text(lines("m1", "m2", "m3", "m4"))
    grown = ingest(engine, toy, [f], source="laptop-b")
    assert (grown.messages, grown.threads, grown.known) == (1, 1, 0)
    assert counts(engine) == (1, 4, 40)


def test_appended_records_are_read_from_where_the_last_ingest_stopped(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2"))
    ingest(engine, toy, [f])
    with open(f, "a") as fh:
        fh.write(lines("m3"))
    summary = ingest(engine, toy, [f])
    assert (summary.grown, summary.messages) == (1, 1)
    assert counts(engine) == (1, 3, 30)


class ToolFormat(ToyFormat):
    """Toy lines with a tool call ({"use": id}) or its result ({"result": id, "error": b})."""

    name = "toy-tools"

    def detect(self, path: Path, head: bytes) -> bool:
        return path.suffix == ".tools"

    def parse(self, path, cursor):
        for item in read_jsonl(path, cursor):
            if not isinstance(item, tuple):
                yield item
                continue
            line, obj = item
            if "use" in obj:
                block = Block("tool_use", tool_name="Bash", tool_use_id=obj["use"], tool_input={})
            else:
                block = Block(
                    "tool_result", text="out", tool_use_id=obj["result"], is_error=obj["error"]
                )
            yield Message("t1", obj["id"], "assistant", seq=line, line=line, blocks=[block])


class ToolPlugin:
    @hookimpl
    def register_formats(self, register):
        register(ToolFormat())


def test_a_call_and_its_result_meet_in_one_row_whichever_ingest_brings_them(engine, tmp_path):
    plugins = get_plugin_manager(extra=[ToolPlugin()])
    f = tmp_path / "a.tools"
    records = [
        {"id": "m1", "use": "c1"},
        {"id": "m2", "use": "c2"},
        {"id": "m3", "result": "c2", "error": False},  # answered in the same ingest
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in records))
    ingest(engine, plugins, [f])
    later = [
        {"id": "m4", "result": "c1", "error": True},  # answered in a later one
        {"id": "m5", "use": "c2"},  # the call sent again, with no result: c2 keeps its own
    ]
    with open(f, "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in later))
    ingest(engine, plugins, [f])
    t = s.ToolCall
    with engine.connect() as conn:
        rows = conn.execute(
            select(t.call_id, t.call_message_id, t.result_message_id, t.is_error).order_by(t.id)
        ).all()
    assert [tuple(r) for r in rows] == [("c1", "m1", "m4", True), ("c2", "m5", "m3", False)]


def test_a_file_rewritten_in_place_is_reingested_without_duplicates(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2", "m3"))
    ingest(engine, toy, [f])
    f.write_text(lines("m1", "m2x"))  # shorter and different: not an append
    summary = ingest(engine, toy, [f])
    assert summary.rewritten == 1
    with engine.connect() as conn:
        ids = sorted(conn.scalars(select(s.Message.native_id)))
    assert ids == ["m1", "m2x"]


def test_a_rewritten_file_read_in_parts_keeps_every_threads_count(
    engine, toy, tmp_path, monkeypatch
):
    # One file feeding two threads, the second one's lines last. Read again in parts of a few
    # records, each written in its own transaction: the first part deletes what the file gave
    # (both threads' rows) but brings only t1's back; t2's come in later parts.
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2", "m3") + lines("s1", "s2", "s3", thread="t2"))
    ingest(engine, toy, [f])
    f.write_text(lines("m1x", "m2", "m3") + lines("s1", "s2", "s3", thread="t2"))
    monkeypatch.setattr("auditor.ingest.ingester.PENDING_RECORDS", 4)
    summary = ingest(engine, toy, [f])
    assert summary.rewritten == 1
    with engine.connect() as conn:
        stored = dict(conn.execute(select(s.Thread.native_id, s.Thread.message_count)).all())
        rows = dict(
            conn.execute(
                select(s.Thread.native_id, func.count(s.Message.id))
                .join(s.Message, s.Message.thread_id == s.Thread.id)
                .group_by(s.Thread.native_id)
            ).all()
        )
    assert stored == rows == {"t1": 3, "t2": 3}


def test_a_malformed_line_is_reported_and_the_rest_is_kept(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1") + "{not json\n" + lines("m2"))
    summary = ingest(engine, toy, [f])
    assert not summary.ok
    assert summary.errors == [
        f"{f}:2: malformed JSON: " + summary.errors[0].split("malformed JSON: ")[1]
    ]
    assert counts(engine)[1] == 2
    assert errors(engine)[0][:2] == (str(f), 2)


def test_a_truncated_last_line_is_read_once_it_is_complete(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    full = lines("m1", "m2")
    f.write_text(full[:-15])  # the agent is half-way through writing m2
    summary = ingest(engine, toy, [f])
    assert "truncated last line" in summary.errors[0] and summary.errors[0].startswith(f"{f}:2:")
    assert counts(engine)[1] == 1
    f.write_text(full)
    summary = ingest(engine, toy, [f])
    assert summary.grown == 1 and summary.ok
    assert counts(engine)[1] == 2


def test_empty_file_is_noted_but_is_not_a_failure(engine, toy, tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    summary = ingest(engine, toy, [tmp_path])
    assert (summary.empty, summary.failed, summary.ok) == (1, 0, True)
    assert "empty file (0 bytes)" in errors(engine)[0][2]


def test_binary_garbage_is_an_unknown_format(engine, toy, tmp_path):
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(os.urandom(4096))
    (tmp_path / "good.jsonl").write_text(lines("m1"))
    summary = ingest(engine, toy, [tmp_path])
    assert summary.failed == 1 and summary.new == 1
    assert summary.errors == [
        f"{junk}: unknown transcript format (tried " + summary.errors[0].split("(tried ")[1]
    ]
    assert "use --format NAME" in summary.errors[0]


def test_forcing_a_format_on_garbage_reports_lines_and_caps_the_noise(engine, toy, tmp_path):
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"\x00\xff garbage\n" * 100)
    summary = ingest(engine, toy, [junk], format_name="toy")
    assert summary.failed == 1
    assert len(summary.errors) == 21 and summary.errors[-1].endswith(
        "and 80 more problems in this file"
    )


def test_unknown_format_name_lists_the_known_ones(engine, toy, tmp_path):
    from auditor.errors import UnknownName

    with pytest.raises(UnknownName, match="Available: .*toy"):
        ingest(engine, toy, [tmp_path], format_name="nope")


def test_unreadable_directory_is_reported_and_the_walk_goes_on(engine, toy, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    (tmp_path / "ok.jsonl").write_text(lines("m1"))
    real_scandir = os.scandir

    def scandir(path="."):  # root ignores chmod, so refuse the directory the way the OS would
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    summary = ingest(engine, toy, [tmp_path])
    assert summary.new == 1 and summary.failed == 1
    assert summary.errors == [f"{locked}: cannot read directory: Permission denied"]


def test_missing_path_is_reported():
    seen = []
    assert list(iter_files(["/no/such/place"], lambda p, m: seen.append((p, m)))) == []
    assert seen == [("/no/such/place", "no such file or directory")]


def test_thread_aggregates_are_refreshed(engine, toy, tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2") + lines("x1", thread="t2"))
    ingest(engine, toy, [f])
    with engine.connect() as conn:
        rows = dict(conn.execute(select(s.Thread.native_id, s.Thread.message_count)).all())
        models = set(conn.scalars(select(s.Thread.models)))
    assert rows == {"t1": 2, "t2": 1}
    assert models == {"toy-1"}


def test_lines_appended_while_the_file_is_read_do_not_make_it_rewritten(
    engine, toy, tmp_path, monkeypatch
):
    # A live hook reads a transcript the agent is still writing: lines can land between the
    # file's size being taken and its end being read. They are read with the rest; the next
    # ingest must go on from there, not find the file "shorter than what was read" and read
    # it whole again as rewritten.
    f = tmp_path / "a.jsonl"
    f.write_text(lines("m1", "m2"))
    parse = ToyFormat.parse
    appended = []

    def written_to_while_read(self, path, cursor):
        first = not appended
        if first:  # the agent writes its next line as the read begins
            appended.append(True)
            with open(f, "a") as fh:
                fh.write(lines("m3"))
        yield from parse(self, path, cursor)
        if first:  # and one more once the read is over, before it is remembered
            with open(f, "a") as fh:
                fh.write(lines("m4"))

    monkeypatch.setattr(ToyFormat, "parse", written_to_while_read)
    first = ingest(engine, toy, [f])
    assert (first.new, first.messages) == (1, 3)
    again = ingest(engine, toy, [f])  # m4, written after the read, is read now
    assert (again.rewritten, again.grown, again.messages) == (0, 1, 1)
    assert (ingest(engine, toy, [f]).skipped, counts(engine)) == (1, (1, 4, 40))
    with open(f, "a") as fh:
        fh.write(lines("m5"))
    grown = ingest(engine, toy, [f])
    assert (grown.rewritten, grown.grown, grown.messages) == (0, 1, 1)
    assert counts(engine) == (1, 5, 50)
