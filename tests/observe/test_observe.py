"""The observer (blis_fast/observe) against a small fault-injecting OpenAI-style server
(fake_openai_server.py, on 127.0.0.1): each fault recorded exactly, timeouts recorded and
not raised, what is sent deterministic, the schedule (closed loop, concurrency limit) kept,
and the recording readable and runnable as a trace."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

import numpy as np
import pytest

from blis_fast.observe import ObserveSettings, observe, outcome
from blis_fast.observe.observer import Observer, first_requests
from blis_fast.observe.prompts import PromptBuilder
from blis_fast.observe.settings import endpoint_base
from blis_fast.errors import ConfigError
from blis_fast.observe.stream import MAX_LINE_BYTES, chat_text
from blis_fast.workload.formats.observed import read_observed
from blis_fast.workload.formats.rich_trace import read_trace
from fake_openai_server import DROP_AFTER, MODEL, FakeServer

TIMEOUT_S = 0.25  # below the slow stream's gap (fake_openai_server.SLOW_GAP_S)


def write_trace_csv(path: Path, rows: list[tuple]) -> Path:
    """A minimal rich trace: (arrival_us, prompt_tokens, output_tokens[, session, turn,
    next_request, follow_delay_us]) rows."""
    extra = len(rows[0]) > 3
    head = "arrival_us,prompt_tokens,output_tokens" + (",session,turn,next_request,follow_delay_us" if extra else "")
    path.write_text(head + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


SPEC = """\
seed: 7
num_requests: 12
prefix_groups:
  system: {count: 2, length: {type: constant, value: 24}}
clients:
  - name: chat
    rate: 200
    prompt_tokens: {type: uniform, min: 8, max: 40}
    output_tokens: {type: uniform, min: 1, max: 4}
    prefix: {group: system, reuse_probability: 1.0}
    session:
      turns: {type: constant, value: 2}
      think_time_s: {type: constant, value: 0.002}
      user_tokens: {type: constant, value: 5}
"""

# prompt length -> the fault the fake server injects (the other lengths are served normally)
FAULTS = {7: "http_429", 8: "http_500", 9: "slow", 10: "drop", 11: "malformed", 12: "stream_error"}


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_each_fault_is_recorded_exactly_and_the_run_finishes(tmp_path, api):
    # chat prompts are text: 4 bytes per token, so the server sees the same lengths
    rows = [(0, 5, 3), (0, 7, 3), (0, 8, 3), (0, 9, 4), (0, 10, 5), (0, 11, 4), (0, 12, 4)]
    req = read_trace(write_trace_csv(tmp_path / "t.csv", rows))[0]
    with FakeServer(FAULTS) as srv:
        result = observe(req, ObserveSettings(srv.url, timeout_s=TIMEOUT_S, api=api), tmp_path / "o.parquet")
    _, header, obs = read_observed(tmp_path / "o.parquet")
    assert list(obs["status"]) == [200, 429, 500, 200, 200, 200, 200]
    assert obs.error == ["", "HTTP 429: rate limited", "HTTP 500: engine crashed",
                         f"timed out after {TIMEOUT_S:g} s (0 tokens)",
                         f"connection dropped after {DROP_AFTER} tokens",
                         "malformed SSE after 1 tokens: data that is not JSON: b'{not json'",
                         "stream error after 1 tokens: out of KV blocks"]
    assert list(obs["timed_out"]) == [False, False, False, True, False, False, False]
    assert [len(obs.token_times(k)) for k in range(7)] == [3, 0, 0, 0, DROP_AFTER, 1, 1]  # (chat: the role chunk is no token)
    assert list(obs["completion_tokens"]) == [3, -1, -1, -1, -1, -1, -1]  # usage only in the finished stream
    assert list(obs["reported_prompt_tokens"]) == [5, -1, -1, -1, -1, -1, -1]
    assert (obs["send_us"] >= 0).all()
    t = obs.token_times(0)
    assert obs["first_token_us"][0] == t[0] and obs["last_token_us"][0] == t[-1] and np.all(np.diff(t) >= 0)
    assert list(obs["first_token_us"][1:4]) == [-1, -1, -1]
    assert result.summary["errors"] == {"dropped": 1, "http_4xx": 1, "http_5xx": 1, "malformed": 1,
                                        "stream_error": 1, "timeout": 1}
    assert (result.summary["sent"], result.summary["ok"], result.summary["timed_out"]) == (7, 1, 1)
    assert header["observed"]["api"] == api and header["observed"]["server_models"][0]["id"] == MODEL


def test_a_server_gone_after_its_model_list_is_recorded_per_request(tmp_path):
    """/v1/models answered, then the server goes away: each request records a connection
    failure (status 0); none raises."""
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, 5, 2), (1000, 6, 2)]))[0]
    with FakeServer() as srv:
        observer = Observer(req, ObserveSettings(srv.url, timeout_s=2))

        async def models_only():
            async with httpx.AsyncClient(trust_env=False) as client:
                await observer.check_server(client)

        asyncio.run(models_only())

    async def already_checked(client):
        return None

    observer.check_server = already_checked
    asyncio.run(observer.run())
    obs = observer.observation()
    assert list(obs["status"]) == [0, 0] and observer.model == MODEL
    assert all(e.startswith("connection failed: ") for e in obs.error)
    assert [outcome(0, e, False) for e in obs.error] == ["connection", "connection"]


def test_what_is_sent_is_deterministic_and_as_documented(tmp_path):
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    req = generate_requests(load_spec(spec), 7)
    bodies = []
    for run in range(2):
        with FakeServer() as srv:
            observe(req, ObserveSettings(srv.url, time_scale=100), tmp_path / f"o{run}.parquet")
            bodies.append(srv.bodies)
    key = lambda b: json.dumps(b, sort_keys=True)  # noqa: E731 -- (arrival order may differ between runs)
    assert sorted(map(key, bodies[0])) == sorted(map(key, bodies[1]))
    got = {len(b["prompt"]): b for b in bodies[0]}
    builder = PromptBuilder(req)
    for k in range(len(req)):
        ids = builder.prompt_ids(k)
        assert len(ids) == req["prompt_len"][k]
        body = next(b for b in bodies[0] if b["prompt"] == ids.tolist())
        n = int(req["output_len"][k])
        assert (body["max_tokens"], body["min_tokens"], body["ignore_eos"], body["stream"]) == (n, n, True, True)
        assert body["stream_options"] == {"include_usage": True} and body["model"] == MODEL
        if req["turn"][k] == 0:  # the shared prefix's ids first
            assert ids[:24].tolist() == req.prefix_tokens[int(req["prefix_id"][k])].tolist()
        else:  # a later turn re-sends the previous turn's prompt
            parent = builder.parent[k]
            assert ids[:req["prompt_len"][parent]].tolist() == PromptBuilder(req).prompt_ids(int(parent)).tolist()
    assert got  # (requests were received)
    a, b = (read_observed(tmp_path / f"o{run}.parquet")[0] for run in range(2))
    assert np.array_equal(a["arrival_us"], b["arrival_us"]) and np.array_equal(a["arrival_us"], req["arrival_us"])
    assert np.array_equal(a["prompt_len"], req["prompt_len"]) and np.array_equal(a["output_len"], req["output_len"])


def test_followers_wait_for_their_turn_and_the_concurrency_limit_holds(tmp_path):
    # rows 0 -> 1 -> 2 a closed-loop session (follow delay 2 ms); rows 3..5 all at once
    rows = [(0, 5, 2, 0, 0, 1, 2000), (-1, 12, 2, 0, 1, 2, 2000), (-1, 20, 2, 0, 2, -1, 0),
            (0, 6, 3, -1, 0, -1, 0), (0, 7, 3, -1, 0, -1, 0), (0, 8, 3, -1, 0, -1, 0)]
    req = read_trace(write_trace_csv(tmp_path / "t.csv", rows))[0]
    with FakeServer() as srv:
        observe(req, ObserveSettings(srv.url, concurrency=1, time_scale=2.0), tmp_path / "o.parquet")
    _, header, obs = read_observed(tmp_path / "o.parquet")
    assert obs.error == [""] * 6
    send, last = obs["send_us"], obs["last_token_us"]
    for parent, child in ((0, 1), (1, 2)):
        assert send[child] >= last[parent] + 2000
    order = np.argsort(send)  # one in flight at a time: each sent after the previous one's last token
    assert np.all(send[order[1:]] >= last[order[:-1]])
    assert header["observed"]["concurrency"] == 1 and header["observed"]["time_scale"] == 2.0


def test_the_recording_runs_as_a_trace(tmp_path):
    import blis_fast

    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec

    req = generate_requests(load_spec(spec), 7)
    with FakeServer() as srv:
        observe(req, ObserveSettings(srv.url, time_scale=100, server_flags=("--tp", "2")), tmp_path / "o.parquet")
    back, header, obs = read_observed(tmp_path / "o.parquet")
    assert len(back) == len(req) and header["observed"]["server_flags"] == ["--tp", "2"]
    assert np.array_equal(obs["completion_tokens"], req["output_len"])
    result = blis_fast.simulate(workload="traces", workload_traces_filepath=str(tmp_path / "o.parquet"))
    assert result.cluster["completed_requests"] == len(req)


def test_first_requests_cuts_links_to_later_rows(tmp_path):
    rows = [(0, 5, 2, 0, 0, 1, 2000), (-1, 12, 2, 0, 1, 2, 2000), (-1, 20, 2, 0, 2, -1, 0)]
    req = read_trace(write_trace_csv(tmp_path / "t.csv", rows))[0]
    cut = first_requests(req, 2)
    assert len(cut) == 2 and list(cut["next_request"]) == [1, -1] and list(cut["follow_delay_us"]) == [2000, 0]
    assert first_requests(req, 5) is req


@pytest.mark.parametrize("given, base", [("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
                                         ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
                                         ("https://host/proxy/v1", "https://host/proxy")])
def test_endpoint_base(given, base):
    assert endpoint_base(given) == base


def test_chat_text_is_four_bytes_a_token():
    assert chat_text(np.array([0, 17575, 128000])) == " aaa zzz hjc"  # (ids mod 26^3 as three letters)


def test_a_hostile_stream_is_bounded_and_recorded(tmp_path):
    """More token chunks than max_tokens allows, a line beyond the line limit: recorded as
    malformed, the stream closed, the run finished."""
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, 13, 2), (0, 14, 2)]))[0]
    with FakeServer({13: "flood", 14: "long_line"}) as srv:
        observe(req, ObserveSettings(srv.url, timeout_s=5), tmp_path / "o.parquet")
    _, _, obs = read_observed(tmp_path / "o.parquet")
    assert obs.error[0] == "malformed SSE after 21 tokens: more than 20 token chunks for max_tokens 2"
    assert obs.error[1] == f"malformed SSE after 1 tokens: a line longer than {MAX_LINE_BYTES} bytes"
    assert list(obs["status"]) == [200, 200]


@pytest.mark.parametrize("body", [b"not json", b'{"data": [{"name": "x"}]}', b"[" * 100_000 + b"]" * 100_000,
                                  b'{"data": "x"}'])
def test_a_model_list_that_is_not_one_is_a_clean_error(tmp_path, body):
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, 5, 2)]))[0]
    with FakeServer(models_body=body) as srv:
        with pytest.raises(ConfigError) as info:
            observe(req, ObserveSettings(srv.url), tmp_path / "o.parquet")
        assert srv.bodies == []
    assert info.value.field == "--endpoint" and "did not answer an OpenAI model list" in str(info.value)
    assert not (tmp_path / "o.parquet").exists()


def test_an_endpoint_that_does_not_answer_is_a_clean_error(tmp_path):
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, 5, 2)]))[0]
    with FakeServer(models_delay_s=0.5) as srv:
        with pytest.raises(ConfigError) as info:
            observe(req, ObserveSettings(srv.url, timeout_s=0.2), tmp_path / "o.parquet")
    assert info.value.field == "--endpoint" and "did not answer within 0.2 s" in str(info.value)
    assert srv.bodies == [] and not (tmp_path / "o.parquet").exists()


def test_a_deep_model_entry_is_kept_cut_in_the_header(tmp_path):
    deep: dict = {"id": MODEL}
    node = deep
    for _ in range(50):
        node["x"] = {}
        node = node["x"]
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, 5, 2)]))[0]
    with FakeServer(models_body=json.dumps({"data": [deep]}).encode()) as srv:
        observe(req, ObserveSettings(srv.url), tmp_path / "o.parquet")
    _, header, obs = read_observed(tmp_path / "o.parquet")
    assert header["observed"]["server_models"][0]["id"] == MODEL and obs.error == [""]


def test_requests_are_never_sent_before_their_time(tmp_path):
    rows = [(k * 20_000, 5 + k, 2) for k in range(6)]  # every 20 ms of the server's time
    req = read_trace(write_trace_csv(tmp_path / "t.csv", rows))[0]
    with FakeServer() as srv:
        observe(req, ObserveSettings(srv.url, time_scale=4.0), tmp_path / "o.parquet")
    _, _, obs = read_observed(tmp_path / "o.parquet")
    assert np.all(obs["send_us"] >= req["arrival_us"])  # (sent at arrival / K of wall time, recorded times K)
    assert np.all(obs["first_token_us"] > obs["send_us"])


def test_a_long_session_is_built_without_recursion(tmp_path):
    """Turn t re-sends turn t-1's prompt and output stand-ins; asking for the last turn
    first rebuilds the 1500 turns before it in a loop (beyond Python's recursion limit)."""
    turns = 1500
    rows = [(0 if t == 0 else -1, 2 * t + 3, 1, 0, t, t + 1 if t + 1 < turns else -1, 0) for t in range(turns)]
    req = read_trace(write_trace_csv(tmp_path / "t.csv", rows))[0]
    last = PromptBuilder(req).prompt_ids(turns - 1)
    builder = PromptBuilder(req)
    previous = builder.prompt_ids(turns - 3)
    before_last = builder.prompt_ids(turns - 2)  # (from the kept sequence of turn - 3)
    assert len(last) == 2 * turns + 1 and last[:len(before_last)].tolist() == before_last.tolist()
    assert before_last[:len(previous)].tolist() == previous.tolist()
    assert builder.prompt_ids(turns - 1).tolist() == last.tolist()


def test_notices_of_a_time_scale_mismatch_and_of_several_tokens_a_chunk():
    from blis_fast.observe.summary import notices
    from blis_fast.workload.formats.observed import Observation

    obs = Observation.empty(3)
    obs.columns["completion_tokens"][:] = [4, 2, -1]
    obs = Observation.from_lists(obs.columns, ["", "", "not sent"], [[1, 2], [3, 4], []])
    models = [{"id": "m", "blis_fast": {"time_scale": 10}}, {"id": "other", "blis_fast": {"time_scale": 3}}]
    got = notices(obs, {"model": "m", "time_scale": 10.0, "server_models": models})
    assert got == ["1 requests streamed fewer chunks than their usage.completion_tokens: the server sends several "
                   "tokens a chunk, and token times are chunk times (docs/observe.md)"]
    got = notices(obs, {"model": "m", "time_scale": 5.0, "server_models": models})
    assert got[0].startswith("the server runs at time scale 10 and the observer at 5 ") and len(got) == 2
    assert notices(Observation.empty(1), {"model": "x", "time_scale": 1.0, "server_models": [{"id": "x"}]}) == []


def test_every_request_ends_once_for_the_progress_bar(tmp_path):
    """on_done is called once per request -- a follower no earlier turn releases (its
    session's first turn cut away) at the start -- so the bar reaches its total."""
    rows = [(0, 5, 2, 0, 0, 1, 0), (-1, 9, 2, 0, 1, -1, 0), (-1, 6, 2, 1, 1, -1, 0), (0, 7, 2, -1, 0, -1, 0)]
    req = read_trace(write_trace_csv(tmp_path / "t.csv", rows))[0]
    ended = []
    with FakeServer() as srv:
        observe(req, ObserveSettings(srv.url), tmp_path / "o.parquet", on_done=lambda: ended.append(1))
    _, _, obs = read_observed(tmp_path / "o.parquet")
    assert len(ended) == 4
    assert obs.error == ["", "", "not sent: no earlier turn of its session was sent", ""]
