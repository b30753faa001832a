"""``blis-fast serve`` over real sockets (127.0.0.1): the OpenAI endpoints, streaming with
the openai client, /metrics parsed by Prometheus's parser, and OpenAI-style errors."""

from __future__ import annotations

import json

import httpx
import pytest

from blis_fast.serve.server import TOKEN_TEXT, chat_text, text_token_ids

MODEL = "meta-llama/llama-3.1-8b-instruct"


def test_health_and_models(serve_app):
    url, server = serve_app()
    assert httpx.get(f"{url}/health").status_code == 200
    models = httpx.get(f"{url}/v1/models").json()
    entry = models["data"][0]
    assert entry["id"] == MODEL and entry["max_model_len"] == 2048
    assert entry["blis_fast"]["time_scale"] == 20.0 and entry["blis_fast"]["instances"] == 1
    assert len(entry["blis_fast"]["beta_coeffs"]) == 3


def test_a_completion_returns_max_tokens_tokens(serve_app):
    url, server = serve_app()
    r = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": list(range(100)), "max_tokens": 7},
                   timeout=30)
    body = r.json()
    assert r.status_code == 200, body
    assert body["choices"][0]["text"] == TOKEN_TEXT * 7 and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}
    text = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "hello world", "max_tokens": 2},
                      timeout=30).json()
    assert text["usage"]["prompt_tokens"] == 3  # ceil(11 bytes / 4)


def test_the_openai_client_streams(serve_app):
    openai = pytest.importorskip("openai")
    url, server = serve_app()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=30)
    chunks = list(client.completions.create(model=MODEL, prompt=[1, 2, 3, 4] * 50, max_tokens=12, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == [TOKEN_TEXT] * 12
    assert chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.prompt_tokens == 200
    chat = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi there"}],
                                               max_tokens=5, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
    assert content == TOKEN_TEXT * 5 and chat[-1].choices[0].finish_reason == "length"
    whole = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi there"}],
                                           max_tokens=4)
    assert whole.choices[0].message.content == TOKEN_TEXT * 4
    assert whole.usage.prompt_tokens == len(text_token_ids(chat_text([{"role": "user", "content": "hi there"}])))


def test_two_models_and_disaggregation_are_served(serve_app):
    from builders import ROOT

    url, server = serve_app(config=str(ROOT / "configs/examples/two-models.yaml"))
    names = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    assert names == ["meta-llama/llama-3.1-8b-instruct", "qwen/qwen2.5-7b-instruct"]
    for name in names:
        r = httpx.post(f"{url}/v1/completions", json={"model": name, "prompt": "hi", "max_tokens": 2}, timeout=30)
        assert r.json()["model"] == name and r.json()["usage"]["completion_tokens"] == 2
    text = httpx.get(f"{url}/metrics").text
    assert text.count("# TYPE vllm:generation_tokens_total counter") == 1
    assert all(f'vllm:generation_tokens_total{{model_name="{n}"}} 2' in text for n in names)
    url, server = serve_app(config=str(ROOT / "configs/examples/pd/2p6d.yaml"), pd_decider="always")
    r = httpx.post(f"{url}/v1/completions", json={"prompt": list(range(500)), "max_tokens": 3}, timeout=30)
    assert r.json()["usage"]["completion_tokens"] == 3
    assert int((server.engine.state.pd_reqs["prefill_instance"] >= 0).sum()) == 1  # (prefilled on a prefill instance)


def test_metrics_parse_and_count(serve_app):
    parser = pytest.importorskip("prometheus_client.parser")
    url, server = serve_app()
    for n in (3, 5):
        httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": list(range(40)), "max_tokens": n},
                   timeout=30)
    families = {f.name: f for f in parser.text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
    value = {f: families[f].samples[0].value for f in ("vllm:num_requests_running", "vllm:num_requests_waiting")}
    assert value == {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0}
    gen = [s for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total")]
    assert gen[0].value == 8
    ttft = {s.name: s.value for s in families["vllm:time_to_first_token_seconds"].samples}
    assert ttft["vllm:time_to_first_token_seconds_count"] == 2
    itl = {s.name: s.value for s in families["vllm:time_per_output_token_seconds"].samples}
    assert itl["vllm:time_per_output_token_seconds_count"] == 8 - 2
    assert families["vllm:prompt_tokens"].samples[0].value == 80


@pytest.mark.parametrize("body, status, param", [
    ({"model": "nope", "prompt": "x"}, 404, "model"),
    ({"model": MODEL, "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 2.5}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": ""}, 400, "prompt"),
    ({"model": MODEL, "prompt": [1, -2]}, 400, "prompt"),
    ({"model": MODEL, "prompt": ["a", "b"]}, 400, "prompt"),
    ({"model": MODEL, "prompt": list(range(2040)), "max_tokens": 20}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "n": 2}, 400, "n"),
    ({"model": MODEL, "prompt": "x", "stream": "yes"}, 400, "stream"),
])
def test_bad_requests_get_openai_errors(serve_app, body, status, param):
    url, server = serve_app()
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["param"] == param and "\n" not in err["message"] and err["message"]


def test_bad_bodies_and_chat_messages(serve_app):
    url, server = serve_app()
    r = httpx.post(f"{url}/v1/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "wizard"}]}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0]"
    r = httpx.post(f"{url}/v1/completions", content=b" " * (17 * 2**20), timeout=30)
    assert r.status_code == 413


def test_a_full_server_answers_503(serve_app):
    url, server = serve_app(time_scale=0.05, capacity=1)  # (slow: the first request holds the only row)
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{url}/v1/completions", json={"model": MODEL, "prompt": [1] * 10,
                                                                  "max_tokens": 3, "stream": True}) as first:
            r = client.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": [1] * 10, "max_tokens": 3})
            assert r.status_code == 503 and "--capacity" in r.json()["error"]["message"]
            lines = [json.loads(x[6:]) for x in first.iter_lines() if x.startswith("data: {")]
    assert len(lines) == 3


@pytest.mark.slow
def test_200_concurrent_streams_each_get_their_tokens(serve_app):
    import asyncio

    url, server = serve_app(time_scale=2.0, capacity=256, max_model_len=4096, num_instances=4)

    async def one(client, k):
        got = []
        async with client.stream("POST", f"{url}/v1/completions",
                                 json={"prompt": list(range(100 + k)), "max_tokens": 20, "stream": True}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    got.append(json.loads(line[6:])["choices"][0]["finish_reason"])
        return got

    async def main():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=260)) as client:
            return await asyncio.gather(*(one(client, k) for k in range(200)))

    streams = asyncio.run(main())
    assert all(s == [None] * 19 + ["length"] for s in streams)
    m = server.metrics[0]
    assert m.finished["length"] == 200 and m.generation_tokens == 4000 and m.lateness.count == 4000
