"""The event loop with several deployments (docs/architecture.md "Deployments"): per-deployment
instance rows, step times and limits; requests routed only to their model's instances."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_fast.config.sim import build_config
from blis_fast.errors import ConfigError
from blis_fast.results import Result
from blis_fast.run import build_state, build_workload, resolve, run_to_end
from blis_fast_kernels.schema import RequestState, TraceLevel
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "configs" / "examples"
LLAMA, QWEN = "meta-llama/llama-3.1-8b-instruct", "qwen/qwen2.5-7b-instruct"


def two_models(tmp_path, clients=None, deployments=None, **spec_changes):
    """configs/examples/two-models.yaml, optionally with only some of its deployments and
    of its spec's clients (a copy of the spec in tmp_path)."""
    doc = yaml.safe_load((EXAMPLES / "two-models.yaml").read_text())
    spec = yaml.safe_load((ROOT / "configs" / "workloads" / "two-models.yaml").read_text())
    spec.update(spec_changes)
    if clients is not None:
        spec["clients"] = [spec["clients"][k] for k in clients]
    if deployments is not None:
        doc["deployments"] = [doc["deployments"][k] for k in deployments]
    path = tmp_path / f"spec-{clients}-{deployments}.yaml"
    path.write_text(yaml.safe_dump(spec))
    doc["workload"]["spec_filepath"] = str(path)
    return build_config(doc)


def run(cfg, trace_level=0):
    setup = resolve(cfg)
    wl = build_workload(cfg)
    st = run_to_end(build_state(setup, wl, trace_level=trace_level))
    return setup, wl, st


def test_each_model_runs_as_its_deployment_alone(tmp_path):
    """Acceptance: each request goes only to its model's instances, and each model's
    per-request results equal those of its deployment run alone with its own client."""
    setup, wl, st = run(two_models(tmp_path, duration_s=20))
    both = Result(setup, wl, st).request_columns()
    assert (st.reqs["state"] == RequestState.COMPLETED).all()
    for k, dep in enumerate(setup.deployments):
        mine = wl.model == k  # one deployment per model, client k asks for model k
        inst = st.reqs["instance"][mine]
        assert ((inst >= dep.first_instance) & (inst < dep.first_instance + dep.instances)).all()
        assert np.unique(inst).size == dep.instances  # (round-robin: every instance of its model)
        a_setup, a_wl, a_st = run(two_models(tmp_path, clients=[k], deployments=[k], duration_s=20))
        alone = Result(a_setup, a_wl, a_st).request_columns()
        assert len(a_wl) == int(mine.sum()) > 0
        for col in ("arrival_us", "ttft_us", "e2e_us", "itl_mean_us", "completion_us", "generated_tokens"):
            assert np.array_equal(both[col][mine], alone[col]), (dep.name, col)
        assert np.array_equal(inst - dep.first_instance, alone["instance"]), dep.name


def test_candidates_are_the_requests_models_instances(tmp_path):
    """The decision trace: every candidate and alternative serves the request's model."""
    cfg = two_models(tmp_path, duration_s=10)
    for routing in ("least-loaded", "weighted"):
        cfg_r = build_config(cfg.to_dict(), {"routing_policy": routing})
        setup, wl, st = run(cfg_r, TraceLevel.DECISIONS)
        log = st.route_log[: int(st.loop[0]["route_records"])]
        model = wl.model[log["request"]]
        inst_model = st.inst["model"]
        assert len(log) == len(wl)
        assert np.array_equal(inst_model[log["chosen_instance"]], model)
        alts = log["alt_instance"]
        assert (np.where(alts >= 0, inst_model[np.maximum(alts, 0)], model[:, None]) == model[:, None]).all()
        assert (log["candidates"] == 2).all() and (alts[:, 0] >= 0).all() and (alts[:, 1] < 0).all()


def test_instance_rows_follow_their_deployment():
    cfg = build_config({"deployments": [
        {"name": "big", "model": LLAMA, "hardware": "H100", "instances": 2, "max_num_seqs": 8,
         "max_num_batched_tokens": 1024, "total_kv_blocks": 300},
        {"name": "small", "model": LLAMA, "hardware": "A100-80", "instances": 3, "max_num_seqs": 4,
         "max_num_batched_tokens": 512, "total_kv_blocks": 120, "latency_model": "roofline"}],
        "workload": {"type": "chatbot", "rate": 30, "num_requests": 300},
        "simulation": {"check_invariants": True, "seed": 5}})
    setup, wl, st = run(cfg)
    inst = st.inst
    assert list(inst["pool"]) == [0, 0, 1, 1, 1] and not inst["model"].any()
    assert list(inst["max_num_seqs"]) == [8, 8, 4, 4, 4]
    assert list(inst["kv_total"]) == [300, 300, 120, 120, 120]
    assert list(inst["kv_offset"]) == [0, 300, 600, 720, 840] and len(st.blocks) == 960
    assert st.roofline.shape[0] == 2
    # (c) every request ran with the KV and batch checks after every step, within its instance's limits
    assert (st.reqs["state"] == RequestState.COMPLETED).all()
    assert (inst["batch_peak"] <= inst["max_num_seqs"]).all()
    assert (inst["kv_peak_allocated"] <= inst["kv_total"]).all() and (inst["kv_allocated"] == 0).all()
    assert (inst["injected"] > 0).all()


@pytest.mark.parametrize("latency", ["blackbox", "roofline"])
def test_hetero_fleet_routes_by_load_and_steps_at_each_gpus_speed(latency):
    doc = yaml.safe_load((EXAMPLES / "hetero-fleet.yaml").read_text())
    for d in doc["deployments"]:
        d["latency_model"] = latency
    cfg = build_config(doc, {"routing_policy": "least-loaded", "num_requests": 600})
    setup, wl, st = run(cfg)
    inst = st.inst
    # one roofline row per deployment, each its GPU's
    assert not np.array_equal(st.roofline[0], st.roofline[1])
    h100, a100 = inst["pool"] == 0, inst["pool"] == 1
    assert inst["injected"][h100].sum() > 0 and inst["injected"][a100].sum() > 0
    mean_step = inst["busy_us"] / np.maximum(inst["steps"], 1)
    assert mean_step[a100].mean() > mean_step[h100].mean()  # A100-80 is slower per step
    # the faster H100s drain their queues sooner, so least-loaded sends them more
    assert inst["injected"][h100].sum() > inst["injected"][a100].sum()


CHAT_SPEC = {
    "seed": 7, "duration_s": 20,
    "prefix_groups": {"system": {"count": 3, "length": {"type": "lognormal", "p50": 300, "p90": 700, "max": 1500}}},
    "clients": [
        {"name": f"chat-{k}", "model": model, "rate": 2,
         "prompt_tokens": {"type": "lognormal", "p50": 100, "p90": 400, "max": 2000},
         "output_tokens": {"type": "lognormal", "p50": 80, "p90": 300, "max": 800},
         "prefix": {"group": "system", "reuse_probability": 0.9},
         "session": {"turns": {"type": "exponential", "mean": 3, "min": 1, "max": 6},
                     "think_time_s": {"type": "lognormal", "p50": 2, "p90": 6, "max": 30},
                     "user_tokens": {"type": "lognormal", "p50": 40, "p90": 150, "max": 600}}}
        for k, model in enumerate((LLAMA, QWEN))],
}
BLOCK_SIZES = (16, 32)


def per_model_block_sizes(tmp_path, clients=(0, 1)):
    """Llama (block size 16) and qwen (32), one instance each with a small KV cache (so
    blocks are evicted and reused), on multi-turn chats sharing system prompts."""
    spec = dict(CHAT_SPEC, clients=[CHAT_SPEC["clients"][k] for k in clients])
    path = tmp_path / f"chat-{'-'.join(map(str, clients))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    deployments = [{"name": f"d{k}", "model": (LLAMA, QWEN)[k], "hardware": "H100", "instances": 1,
                    "block_size": BLOCK_SIZES[k], "total_kv_blocks": 6000 // BLOCK_SIZES[k]} for k in clients]
    return build_config({"deployments": deployments, "workload": {"spec_filepath": str(path)},
                         "simulation": {"check_invariants": True}})


def test_models_with_different_block_sizes_run_as_each_alone(tmp_path):
    """Block size is per model: llama's requests are keyed and cached per 16 tokens,
    qwen's per 32, and each model's per-request results equal its deployment run alone
    (KV conservation checked after every step)."""
    setup, wl, st = run(per_model_block_sizes(tmp_path))
    assert wl.model_block_sizes == BLOCK_SIZES and list(st.inst["block_size"]) == list(BLOCK_SIZES)
    assert st.ride_phase.shape[1] == max(BLOCK_SIZES)
    both = Result(setup, wl, st).request_columns()
    reqs = st.reqs
    assert (reqs["state"] == RequestState.COMPLETED).all()
    assert (st.inst["kv_allocated"] == 0).all()
    for k, bs in enumerate(BLOCK_SIZES):
        mine = wl.model == k
        # keys and cache hits in the model's own blocks
        assert np.array_equal(reqs["key_count"][mine], (wl.prompt_len + wl.output_len)[mine] // bs)
        hits = reqs["cached_tokens"][mine]
        assert hits.sum() > 0 and (hits % bs == 0).all()
        a_setup, a_wl, a_st = run(per_model_block_sizes(tmp_path, clients=(k,)))
        assert a_wl.block_size == bs and not a_wl.model_block_sizes
        alone = Result(a_setup, a_wl, a_st).request_columns()
        assert len(a_wl) == int(mine.sum()) > 0
        assert np.array_equal(reqs["cached_tokens"][mine], a_st.reqs["cached_tokens"])
        for col in ("arrival_us", "ttft_us", "e2e_us", "itl_mean_us", "completion_us", "generated_tokens"):
            assert np.array_equal(both[col][mine], alone[col]), (k, col)
        assert int(st.inst["prefix_hit_tokens"][k]) == int(a_st.inst["prefix_hit_tokens"][0])
    # a block size of 16 caches prompt prefixes that one of 32 cannot (finer blocks)
    assert (reqs["cached_tokens"][wl.model == 0] % 32 != 0).any()


def test_a_workload_keyed_for_other_block_sizes_is_refused(tmp_path):
    """A workload must be keyed for each model's block size (API: simulate(workload=...))."""
    cfg = per_model_block_sizes(tmp_path)
    wl = build_workload(cfg)
    one_size = replace(wl, model_block_sizes=())  # (as if keyed for 16 tokens throughout)
    with pytest.raises(ConfigError) as err:
        build_state(resolve(cfg), one_size)
    assert err.value.field == "workload" and "16, 32" in str(err.value)


def test_deployments_of_one_model_must_agree_on_the_block_size(tmp_path):
    deployments = [{"name": "a", "model": LLAMA, "instances": 1},
                   {"name": "b", "model": LLAMA, "hardware": "A100-80", "instances": 1, "block_size": 32}]
    with pytest.raises(ConfigError) as err:
        build_config({"deployments": deployments})
    assert err.value.field == "deployments[1].block_size" and "must agree" in str(err.value)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"deployments": deployments}))
    assert_clean_error(*cli_in_process("run", "--config", path), ["deployments[1].block_size", "must agree"])
