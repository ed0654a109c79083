"""Answers remembered about texts (`auditor.text_cache`): the same answers as the function's,
and a long text is remembered by its digest, not kept, its answers kept up to a bound."""

from __future__ import annotations

import gc
import weakref

from auditor import text_cache as tc


class Text(str):
    """A str that can be watched with a weak reference."""


def _shout(text: str, times: int = 1) -> str:
    return text.upper() * times


def test_answers_are_the_function_s_for_short_and_long_texts_alike():
    calls = []

    def upper(text: str, times: int = 1) -> str:
        calls.append(text)
        return _shout(text, times)

    cached = tc.text_cache(16)(upper)
    short, long = "ab\u00e9", "x\u00e9" * 1000
    for text in (short, long, short, long):
        assert cached(text) == _shout(text)
        assert cached(text, 2) == _shout(text, 2)
    assert cached(long + "!") == _shout(long + "!")  # another text, its own answer
    assert calls == [short, short, long, long, long + "!"]  # each asked for once


def test_a_long_text_is_not_kept_and_the_answers_about_long_texts_are_bounded(monkeypatch):
    monkeypatch.setattr(tc, "KEPT_CHARS", 50_000)
    cached = tc.text_cache(16384)(_shout)
    first = Text("a" * 5000)
    watched = weakref.ref(first)
    assert cached(first) == "A" * 5000
    for n in range(tc.DIGESTS_KEPT + 100):  # other long texts, as a long session brings
        cached(f"{n:05d}" + "b" * 5000)
    del first
    gc.collect()
    assert watched() is None, "the cache kept the long text"
    # Its answers about long texts (5,005 characters each) stop at 50,000 characters.
    held = sum(len(answer) for answer, _ in cached.long_answers.values())
    assert 45_000 < held <= 50_000


def test_a_short_text_is_kept_as_lru_cache_keeps_it():
    cached = tc.text_cache(16384)(_shout)
    short = Text("short")
    watched = weakref.ref(short)
    cached(short)
    del short
    gc.collect()
    assert watched() is not None


def test_the_texts_kept_for_their_digests_are_a_few_hundred_kb_at_most():
    # A text is digested once while it goes through several cached functions in a row; a few
    # large tool outputs must not stay alive for that alone.
    cached = tc.text_cache(16384)(len)
    big = Text("x" * 200_000)
    watched = weakref.ref(big)
    assert cached(big) == 200_000
    for n in range(3):
        assert cached(f"{n}" + "y" * 100_000) == 100_001
    del big
    gc.collect()
    assert watched() is None, "a large text was kept for its digest"
    assert sum(len(text) for text, _ in tc._DIGESTED.values()) <= tc.DIGESTED_CHARS
    again = "z" * 5000  # a text just digested is found by identity, not hashed again
    cached(again)
    assert tc._DIGESTED[id(again)][0] is again
