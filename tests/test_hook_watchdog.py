"""The synchronous hook's deadline is a SIGALRM watchdog; it must hold even when the first
DeadlinePassed is raised somewhere Python drops exceptions (a finalizer, a weakref callback)."""

import gc
import sys
import time

import pytest

from auditor.live.sync_hook import DeadlinePassed, Watchdog


class SwallowsInFinalizer:
    """Sleeps in __del__, where an exception is printed as 'Exception ignored' and dropped."""

    def __del__(self):
        time.sleep(0.4)


def test_a_deadline_swallowed_by_a_finalizer_is_raised_again(monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    with pytest.raises(DeadlinePassed, match="ran past 0.2s") as raised, Watchdog(0.2):
        obj = SwallowsInFinalizer()
        del obj  # the alarm fires inside __del__: that DeadlinePassed is lost
        gc.collect()
        time.sleep(5)  # the repeated alarm raises here
    assert dropped and set(dropped) == {DeadlinePassed}  # what the finalizer swallowed
    # Raised again by a later alarm, inside the block (in gc.collect on a loaded machine, else
    # in the sleep), not by the block's end: where it came from says so.
    here = [e for e in raised.traceback if e.frame.code.raw is SELF.__code__]
    assert str(here[-1].statement).strip().split("  #")[0] in ("gc.collect()", "time.sleep(5)")


SELF = test_a_deadline_swallowed_by_a_finalizer_is_raised_again


def test_leaving_the_block_disarms_the_watchdog():
    with Watchdog(0.05):
        pass
    time.sleep(0.3)  # no alarm, no DeadlinePassed after the block


def test_a_block_that_ends_in_time_raises_nothing():
    with Watchdog(5):
        time.sleep(0.05)
