"""A wake-up at a precise wall time for the server's driver (``server.LiveServer.drive``).

An event loop's timers have a millisecond's resolution (asyncio's fire up to ~1.4 ms late,
uvloop's up to 1 ms early or late): as much jitter again as the network's, on every token
a calibration times.  A thread waiting on a condition wakes close to its deadline and
hands the wake-up to the loop (``call_soon_threadsafe``), which leaves its poll at once.
Waking a thread and then the loop takes 0.1-0.5 ms on a virtual machine, so the driver
sets the alarm ALARM_LEAD_S early and spins the rest of the way (``await
asyncio.sleep(0)``: the handlers go on meanwhile): a token goes out within a loop
iteration or two of its time.  The loop's own timer stays as a backstop, ALARM_BACKSTOP_S
after the time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

ALARM_LEAD_S = 0.0005  # the alarm rings this long before the time; the driver spins the rest
ALARM_BACKSTOP_S = 0.002  # the driver's own timer fires this long after the time (a late thread)


class Alarm:
    """Sets ``event`` (an asyncio.Event of ``loop``) when ``clock()`` reaches the time last
    given to ``at``; one daemon thread, ended by ``stop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.loop, self.event, self.clock = loop, event, clock
        self._cond = threading.Condition()
        self._due: float | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="blis-fast-alarm", daemon=True)
        self._thread.start()

    def at(self, due: float | None) -> None:
        """Wake the loop at wall time ``due`` (``clock()``'s); None: no alarm."""
        with self._cond:
            self._due = due
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._due is None:
                    self._cond.wait()
                    continue
                remaining = self._due - self.clock()
                if remaining > 0:
                    self._cond.wait(remaining)  # (woken early when the time changes: looked at again)
                    continue
                self._due = None
                try:
                    self.loop.call_soon_threadsafe(self.event.set)
                except RuntimeError:  # the loop closed under us
                    return
