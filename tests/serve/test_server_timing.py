"""When a request arrives in ``blis-fast serve``'s engine and when the driver wakes
(blis_fast/serve/server.py, alarm.py; docs/serve.md): the arrival is the moment the
handler starts, before the body is read; arrivals keep their order; the alarm rings at
its time, not before, and follows a time moved or taken back."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
import pytest

import blis_fast.serve.server as server_module
from blis_fast.run.api import as_config
from blis_fast.run.resolve import resolve
from blis_fast.serve.alarm import Alarm
from blis_fast.serve.engine import LiveEngine
from blis_fast.serve.server import ApiError, LiveServer, create_app


class ManualClock:
    """A wall clock (seconds) the test moves by hand."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def live_server(clock=None) -> LiveServer:
    engine = LiveEngine(resolve(as_config(None, {"num_instances": 1})), capacity=8, max_model_len=1024)
    return LiveServer(engine, time_scale=1.0, **({} if clock is None else {"clock": clock}))


def test_a_request_arrives_when_its_handler_starts_not_when_its_body_is_parsed(monkeypatch):
    clock = ManualClock()
    server = live_server(clock)
    real_read = server_module.read_json

    async def slow_read(request):  # (reading and parsing the body take 250 ms of the clock)
        body = await real_read(request)
        clock.t += 0.25
        return body

    taken = []

    def submit(ids, max_tokens, model=0, came_us=None):
        taken.append((came_us, server.sim_now()))
        raise ApiError(503, "enough")  # (the request goes no further: no driver runs here)

    monkeypatch.setattr(server_module, "read_json", slow_read)
    monkeypatch.setattr(server, "submit", submit)

    async def post():
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/completions", content=json.dumps({"prompt": [1, 2, 3], "max_tokens": 2}))

    clock.t += 1.5
    assert asyncio.run(post()).status_code == 503
    assert taken == [(1_500_000, 1_750_000)]


def test_arrivals_keep_their_order_and_never_precede_the_engine_clock():
    clock = ManualClock()
    server = live_server(clock)
    clock.t += 0.002
    first = server.submit(np.arange(10), 2, came_us=1500)
    late = server.submit(np.arange(10), 2, came_us=900)  # (came in earlier, parsed later)
    assert (first.arrival_us, late.arrival_us) == (1500, 1500)
    engine = server.engine
    while (e := engine.next_event_us()) is not None:
        engine.advance(e)
    ran_to = int(engine.state.loop[0]["clock_us"])
    assert ran_to > 1600
    clock.t += 0.05
    stale = server.submit(np.arange(10), 2, came_us=1600)  # (the engine has run past it meanwhile)
    assert stale.arrival_us == ran_to
    assert server.submit(np.arange(10), 2).arrival_us == int((clock.t - 100.0) * 1e6)  # (no came_us: now, 52 ms)


def test_the_alarm_rings_at_its_time_and_follows_a_new_one():
    rung = []

    async def main():
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        clock = loop.time
        alarm = Alarm(loop, event, clock)
        try:
            alarm.at(clock() + 10.0)
            due = clock() + 0.02
            alarm.at(due)  # (moved before it rang: a wait for the first time would time out below)
            await asyncio.wait_for(event.wait(), 5)
            rung.append(clock() >= due)
            event.clear()
            alarm.at(clock() + 0.01)
            alarm.at(None)  # (taken back)
            await asyncio.sleep(0.1)
            rung.append(event.is_set())
        finally:
            alarm.stop()
        rung.append(alarm._thread.is_alive())

    asyncio.run(main())
    assert rung == [True, False, False]


def test_the_driver_stops_its_alarm_thread():
    server = live_server()

    async def main():
        task = asyncio.get_running_loop().create_task(server.drive())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    import threading
    assert not [t for t in threading.enumerate() if t.name == "blis-fast-alarm"]


def test_no_collection_walks_the_startup_heap_while_serving():
    """blis_fast/serve/heap.py: the server's lifespan freezes what is alive when it starts
    (a full collection would stop the driver for tens of ms) and unfreezes it when it ends."""
    import gc

    from live_server import running

    assert gc.get_freeze_count() == 0
    server = live_server()
    with running(create_app(server)) as url:
        assert gc.get_freeze_count() > 10_000  # (numpy, the engine, starlette...: all frozen)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    assert gc.get_freeze_count() == 0


def test_quiet_heap_freezes_for_its_block_only():
    import gc

    from blis_fast.serve.heap import quiet_heap

    kept = [[k] for k in range(1000)]  # (tracked objects alive when the block starts)
    with quiet_heap():
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        gc.collect()
        assert gc.get_freeze_count() == frozen  # (a collection leaves the frozen objects alone)
    assert gc.get_freeze_count() == 0
