"""KV cache tiers, the configuration layer (blis_fast.config.kv_tiers): a deployments: entry's
and a pool's ``kv_tiers`` list with ``kv_store`` and ``kv_load``, the ``kv_tiers`` section
and its ``--kv-*`` flags (the single-deployment shorthand), the resolved tiers in blocks
(run.resolve), the config echo, ``--set`` axes and batch scenarios, and every rule's
one-line error naming the field (flag, YAML path or keyword).  The tiers engine has its
own tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_fast.adapters.core import FitnessSet
from blis_fast.batch.scenarios import prepare, scenario_from_dict
from blis_fast.config.deployments import DeploymentSpec
from blis_fast.config.kv_tiers import (
    KvTiersConfig,
    KvTiersSpec,
    ResolvedKvTiers,
    ResolvedTier,
    TierSpec,
    block_bytes,
)
from blis_fast.config.sim import build_config, with_overrides
from blis_fast.errors import ConfigError
from blis_fast.run.api import simulate
from blis_fast.run.resolve import resolve
from blis_fast.studies.sweep import parse_axis, run_study
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

LLAMA = "meta-llama/llama-3.1-8b-instruct"
# llama-3.1-8b: 2 (K and V) x 32 layers x 8 KV heads x 128 head dims x 2 bytes = 131072 KV bytes per token
LLAMA_BLOCK = 131072 * 16  # bytes of a 16-token block at TP 1: 2097152


def entry(**keys) -> dict:
    return {"name": "llama", "model": LLAMA, **keys}


def deployments(*entries) -> dict:
    return {"deployments": list(entries or [entry()])}


def resolved_deployment(cfg):
    (dep,) = resolve(cfg).deployments
    return dep


# ----------------------------------------------------------------------------- defaults and specs


def test_no_tiers_by_default():
    cfg = build_config({})
    assert cfg.kv_tiers == KvTiersConfig() and cfg.deployment_list()[0].kv_tiers is None
    dep = resolved_deployment(cfg)
    assert dep.kv_tiers is None and dep.pools[0].kv_tiers is None
    data = cfg.to_dict()
    assert "kv_tiers" not in data  # (the results JSON's config echo: the same keys as before tiers)
    entry_data = build_config(deployments()).to_dict()["deployments"][0]
    assert not {"kv_tiers", "kv_store", "kv_load"} & set(entry_data)


def test_tier_defaults_are_per_tier():
    cpu, disk = TierSpec("cpu", blocks=10), TierSpec("disk", bytes=1e12)
    assert (cpu.read_gbps, cpu.write_gbps, cpu.latency_us) == (25.0, 25.0, 10.0)
    assert (disk.read_gbps, disk.write_gbps, disk.latency_us) == (7.0, 3.0, 100.0)
    assert disk.bytes == 10**12 and isinstance(disk.bytes, int)
    spec = KvTiersSpec((cpu, disk))
    assert (spec.store, spec.load, spec.enabled) == ("prompt-only", "async", True)
    assert not KvTiersSpec((TierSpec("cpu", blocks=0, read_gbps=0, write_gbps=0),)).enabled  # (0: off)


def test_block_bytes_is_per_tp_rank_rounded_up():
    assert block_bytes(131072, 16, 1) == LLAMA_BLOCK
    assert block_bytes(131072, 16, 2) == LLAMA_BLOCK // 2
    assert block_bytes(10, 3, 4) == 8  # (30 / 4 = 7.5 bytes: a rank holds 8)


# ----------------------------------------------------------------------------- resolution


def test_the_flags_resolve_to_blocks():
    cfg = build_config({}, {"kv_cpu_bytes": "1e10", "kv_cpu_read_gbps": "12.5", "kv_disk_blocks": "5000",
                            "kv_disk_latency_us": "250", "kv_store": "all", "kv_load": "step"})
    dep = resolved_deployment(cfg)
    # 1e10 bytes // 2097152 bytes per block = 4768 whole blocks
    want = ResolvedKvTiers((ResolvedTier("cpu", 4768, 12.5, 25.0, 10.0), ResolvedTier("disk", 5000, 7.0, 3.0, 250.0)),
                           store_all=True, load_step=True, block_bytes=LLAMA_BLOCK)
    assert dep.kv_tiers == want and dep.pools[0].kv_tiers == want


def test_block_size_and_tp_change_the_block_bytes():
    cfg = build_config({}, {"kv_cpu_bytes": "1e10", "tp": "2", "block_size_in_tokens": "32"})
    tiers = resolved_deployment(cfg).kv_tiers
    # 131072 x 32 / 2 = 2097152 bytes per block again; 1e10 // 2097152 = 4768
    assert tiers.block_bytes == 131072 * 32 // 2 and tiers.tiers[0].blocks == 4768
    tiers = resolved_deployment(build_config({}, {"kv_cpu_bytes": "1e10", "tp": "4"})).kv_tiers
    assert tiers.block_bytes == 524288 and tiers.tiers[0].blocks == 19073  # (1e10 // 524288)


def test_a_tier_of_size_zero_is_off():
    tiers = resolved_deployment(build_config({}, {"kv_cpu_blocks": "0", "kv_disk_blocks": "7"})).kv_tiers
    assert [t.name for t in tiers.tiers] == ["disk"]
    assert resolved_deployment(build_config({}, {"kv_cpu_blocks": "0", "kv_store": "all"})).kv_tiers is None


def test_the_yaml_list_and_the_flags_resolve_alike():
    listed = build_config(deployments(entry(kv_tiers=[{"name": "cpu", "bytes": "1e10", "read_gbps": 12.5},
                                                      {"name": "disk", "blocks": 5000, "latency_us": 250}],
                                            kv_store="all")))
    flags = build_config({}, {"kv_cpu_bytes": "1e10", "kv_cpu_read_gbps": "12.5", "kv_disk_blocks": "5000",
                              "kv_disk_latency_us": "250", "kv_store": "all"})
    assert resolved_deployment(listed).kv_tiers == resolved_deployment(flags).kv_tiers is not None
    section = build_config(yaml.safe_load("kv_tiers: {cpu_bytes: 1.0e10, cpu_read_gbps: 12.5, disk_blocks: 5000,\n"
                                          "  disk_latency_us: 250, store: all}"))
    assert resolved_deployment(section).kv_tiers == resolved_deployment(flags).kv_tiers


def test_the_documented_example_resolves():
    text = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text(encoding="utf-8")
    section = text[text.index("## KV cache tiers: configuration"):]
    example = section[section.index("```yaml\n") + len("```yaml\n"):section.index("```\n\n")]
    tiers = resolved_deployment(build_config(yaml.safe_load(example))).kv_tiers
    # the disk tier's 1e12 bytes (read as text by YAML) in 2097152-byte blocks: 476837
    assert [(t.name, t.blocks) for t in tiers.tiers] == [("cpu", 20000), ("disk", 476837)]


def test_pools_take_the_deployments_tiers_or_their_own():
    cfg = build_config(deployments(entry(kv_tiers=[{"name": "cpu", "bytes": "1e10"}],
                                         prefill={"instances": 1, "kv_tiers": []},
                                         decode={"instances": 2, "tp": 2},
                                         both={"instances": 1, "kv_tiers": [{"name": "disk", "blocks": 9}],
                                               "kv_load": "step"},
                                         pd={"on_decode_full": "drop"})))
    dep = resolved_deployment(cfg)
    prefill, decode, both = dep.pools
    assert dep.kv_tiers.tiers == (ResolvedTier("cpu", 4768, 25.0, 25.0, 10.0),)
    assert prefill.kv_tiers is None  # (its own setting: no tier)
    # the deployment's tiers at the decode pool's TP 2: half the bytes per block, twice the blocks
    assert decode.kv_tiers == ResolvedKvTiers((ResolvedTier("cpu", 9536, 25.0, 25.0, 10.0),), False, False,
                                              LLAMA_BLOCK // 2)
    assert both.kv_tiers == ResolvedKvTiers((ResolvedTier("disk", 9, 7.0, 3.0, 100.0),), False, True, LLAMA_BLOCK)


def test_the_pd_shorthand_pools_take_the_shorthand_tiers():
    cfg = build_config({}, {"prefill_instances": "1", "decode_instances": "2", "kv_disk_blocks": "300"})
    dep = resolved_deployment(cfg)
    want = ResolvedKvTiers((ResolvedTier("disk", 300, 7.0, 3.0, 100.0),), False, False, LLAMA_BLOCK)
    assert [p.role for p in dep.pools] == ["prefill", "decode"]
    assert all(p.kv_tiers == want for p in dep.pools) and dep.kv_tiers == want


def test_round_trip_through_to_dict():
    cfg = build_config(deployments(entry(kv_tiers=[{"name": "cpu", "blocks": 100}, {"name": "disk", "bytes": 1e12}],
                                         kv_load="step", prefill={"instances": 1, "kv_tiers": []},
                                         decode={"instances": 1})))
    data = cfg.to_dict()
    (written,) = data["deployments"]
    assert written["kv_tiers"] == [{"name": "cpu", "blocks": 100, "read_gbps": 25.0, "write_gbps": 25.0,
                                    "latency_us": 10.0},
                                   {"name": "disk", "bytes": 10**12, "read_gbps": 7.0, "write_gbps": 3.0,
                                    "latency_us": 100.0}]
    assert (written["kv_store"], written["kv_load"]) == ("prompt-only", "step")
    assert written["prefill"] == {"instances": 1, "kv_tiers": []} and "kv_tiers" not in written["decode"]
    assert build_config(data).deployments == cfg.deployments
    flags = build_config({}, {"kv_cpu_bytes": "1e10", "kv_store": "all"})
    assert flags.to_dict()["kv_tiers"]["cpu_bytes"] == 10**10  # (a whole number of bytes, echoed as one)
    again = build_config(flags.to_dict())
    assert again.kv_tiers == flags.kv_tiers and again.deployment_list() == flags.deployment_list()


def test_with_overrides_and_a_sweep_axis_reach_the_shorthand():
    base = build_config({}, {"num_requests": 5})
    assert with_overrides(base, kv_cpu_blocks=1000).deployment_list()[0].kv_tiers.tiers[0].blocks == 1000
    axis = parse_axis("kv_tiers.cpu_blocks=0,1000,4000")  # (the YAML path names the flat setting)
    assert (axis.name, axis.values) == ("kv_cpu_blocks", (0, 1000, 4000))

    class Built(Exception):
        pass

    def stop(configs):
        raise Built([c.kv_tiers.cpu_blocks for c in configs])

    with pytest.raises(Built) as built:  # (stopped once every point's config is built: nothing runs)
        run_study([(None, base)], ["kv_tiers.cpu_blocks=0,1000,4000"], on_configs=stop)
    assert built.value.args[0] == [0, 1000, 4000]
    with pytest.raises(ConfigError) as exc:
        run_study([(None, base)], ["kv_tiers.cpu_blocks=-1"], on_configs=stop)
    assert exc.value.field == "--set kv_cpu_blocks=-1"
    assert "kv_tiers.cpu_blocks: must be an integer" in exc.value.message


def test_a_batch_scenario_takes_kv_tiers():
    ps = prepare(scenario_from_dict({"name": "tiers", "config": {"num_requests": 5, "kv_tiers": {"cpu_blocks": 64}}},
                                    "scenarios[0]"))
    assert ps.setup.deployments[0].kv_tiers.tiers[0].blocks == 64
    with pytest.raises(ConfigError) as exc:
        scenario_from_dict({"name": "bad", "config": {"kv_tiers": {"cpu_read_gbps": 5}}}, "scenarios[0]")
    assert exc.value.field == "scenarios[0].config.kv_tiers.cpu_read_gbps"
    fitness = FitnessSet([{"name": "listed", "config": {"num_requests": 5, "deployments": [
        entry(kv_tiers=[{"name": "disk", "blocks": 32}], kv_load="step")]}}], workers=1)
    tiers = fitness.scenario("listed").setup.deployments[0].kv_tiers
    assert tiers.tiers[0].blocks == 32 and tiers.load_step


def test_a_run_with_tiers_echoes_them():
    summary = simulate(num_requests=5, kv_cpu_blocks=64, kv_load="step").summary()
    assert summary["run"]["config"]["kv_tiers"]["cpu_blocks"] == 64
    assert summary["run"]["config"]["kv_tiers"]["load"] == "step"


def test_run_help_has_a_kv_tiers_group():
    code, out, _ = cli_in_process("run", "--help")
    assert code == 0
    group = out[out.index("KV tiers:"):out.index("Workload:")]
    assert out.index("Engine & cluster:") < out.index("KV tiers:")
    for flag in ("--kv-cpu-blocks", "--kv-cpu-bytes", "--kv-cpu-read-gbps", "--kv-cpu-write-gbps",
                 "--kv-cpu-latency-us", "--kv-disk-blocks", "--kv-disk-bytes", "--kv-disk-read-gbps",
                 "--kv-disk-write-gbps", "--kv-disk-latency-us", "--kv-store", "--kv-load"):
        assert flag in group


# ----------------------------------------------------------------------------- bad input: one line naming the field

# (flags, keywords of simulate(), the field the keyword error names, words of the message)
BAD_FLAGS = [
    (["--kv-cpu-blocks", "-5"], {"kv_cpu_blocks": -5}, "kv_cpu_blocks", "[0, 1000000000]"),
    (["--kv-disk-bytes", "-1"], {"kv_disk_bytes": -1}, "kv_disk_bytes", "[0, 1e+15]"),
    (["--kv-cpu-bytes", "1.5"], {"kv_cpu_bytes": 1.5}, "kv_cpu_bytes", "whole number of bytes"),
    (["--kv-cpu-blocks", "1e10"], {"kv_cpu_blocks": 10**10}, "kv_cpu_blocks", "[0, 1000000000]"),
    (["--kv-cpu-blocks", "9", "--kv-cpu-read-gbps", "-2"], {"kv_cpu_blocks": 9, "kv_cpu_read_gbps": -2},
     "kv_cpu_read_gbps", "[0, 1e+06]"),
    (["--kv-cpu-blocks", "9", "--kv-cpu-write-gbps", "0"], {"kv_cpu_blocks": 9, "kv_cpu_write_gbps": 0},
     "kv_cpu_write_gbps", "zero bandwidth but nonzero size"),
    (["--kv-disk-bytes", "1e12", "--kv-disk-read-gbps", "1e-7"], {"kv_disk_bytes": 1e12, "kv_disk_read_gbps": 1e-7},
     "kv_disk_read_gbps", "zero bandwidth but nonzero size"),
    (["--kv-disk-blocks", "9", "--kv-disk-read-gbps", "2e6"], {"kv_disk_blocks": 9, "kv_disk_read_gbps": 2e6},
     "kv_disk_read_gbps", "[0, 1e+06]"),
    (["--kv-cpu-blocks", "9", "--kv-cpu-latency-us", "2e9"], {"kv_cpu_blocks": 9, "kv_cpu_latency_us": 2e9},
     "kv_cpu_latency_us", "[0, 1e+09]"),
    (["--kv-cpu-blocks", "9", "--kv-cpu-bytes", "1e9"], {"kv_cpu_blocks": 9, "kv_cpu_bytes": 1e9}, "kv_cpu_bytes",
     "blocks or bytes, not both"),
    (["--kv-cpu-read-gbps", "5"], {"kv_cpu_read_gbps": 5}, "kv_cpu_read_gbps",
     "needs --kv-cpu-blocks or --kv-cpu-bytes"),
    (["--kv-disk-latency-us", "5"], {"kv_disk_latency_us": 5}, "kv_disk_latency_us",
     "needs --kv-disk-blocks or --kv-disk-bytes"),
    (["--kv-store", "all"], {"kv_store": "all"}, "kv_store", "needs a tier"),
    (["--kv-load", "step"], {"kv_load": "step"}, "kv_load", "needs a tier"),
    (["--kv-cpu-blocks", "9", "--kv-store", "sometimes"], {"kv_cpu_blocks": 9, "kv_store": "sometimes"}, "kv_store",
     "prompt-only, all"),
    (["--kv-cpu-blocks", "9", "--disable-prefix-caching"], {"kv_cpu_blocks": 9, "enable_prefix_caching": False},
     "kv_cpu_blocks", "enable_prefix_caching is false"),
]


@pytest.mark.parametrize("flags,keywords,field,words", BAD_FLAGS, ids=[" ".join(c[0]) for c in BAD_FLAGS])
def test_bad_flags_give_one_line(flags, keywords, field, words):
    line = assert_clean_error(*cli_in_process("run", *flags), needles=[words])
    assert line.startswith(f"error: --{field.replace('_', '-')}: "), line
    with pytest.raises(ConfigError) as exc:
        simulate(**keywords)
    assert exc.value.field == field and words in exc.value.message


def test_a_bytes_size_under_one_block_is_refused():
    words = f"smaller than one KV block of {LLAMA_BLOCK} bytes"
    assert_clean_error(*cli_in_process("run", "--kv-cpu-bytes", "1000000"), needles=["--kv-cpu-bytes", words])
    with pytest.raises(ConfigError) as exc:
        simulate(kv_disk_bytes=LLAMA_BLOCK - 1)
    assert exc.value.field == "kv_tiers.disk_bytes (--kv-disk-bytes)" and words in exc.value.message
    # exactly one block is enough
    assert resolved_deployment(build_config({}, {"kv_cpu_bytes": LLAMA_BLOCK})).kv_tiers.tiers[0].blocks == 1


# (a deployments: entry's keys, the field named, words of the message)
BAD_ENTRIES = [
    (dict(kv_tiers=[{"name": "cpu", "blocks": -1}]), "deployments[0].kv_tiers[0].blocks", "[0, 1000000000]"),
    (dict(kv_tiers=[{"name": "cpu", "bytes": -1}]), "deployments[0].kv_tiers[0].bytes", "[0, 1e+15]"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5, "write_gbps": -1}]), "deployments[0].kv_tiers[0].write_gbps",
     "[0, 1e+06]"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5, "read_gbps": 0}]), "deployments[0].kv_tiers[0].read_gbps",
     "zero bandwidth but nonzero size"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5}, {"name": "cpu", "blocks": 5}]), "deployments[0].kv_tiers[1].name",
     "duplicate tier 'cpu'"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5, "bytes": 1e9}]), "deployments[0].kv_tiers[0].bytes",
     "blocks or bytes, not both"),
    (dict(kv_tiers=[{"name": "ssd", "blocks": 5}]), "deployments[0].kv_tiers[0].name", "allowed: cpu, disk"),
    (dict(kv_tiers=[{"name": "disk", "blocks": 5}, {"name": "cpu", "blocks": 5}]), "deployments[0].kv_tiers[1].name",
     "disk is the slower tier"),
    (dict(kv_tiers=[{"blocks": 5}]), "deployments[0].kv_tiers[0].name", "is required"),
    (dict(kv_tiers=[{"name": "cpu"}]), "deployments[0].kv_tiers[0].blocks", "blocks or bytes"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5, "size": 5}]), "deployments[0].kv_tiers[0].size", "unknown key"),
    (dict(kv_tiers={"name": "cpu", "blocks": 5}), "deployments[0].kv_tiers", "a list of tiers"),
    (dict(kv_store="all"), "deployments[0].kv_store", "without a tier"),
    (dict(kv_tiers=[], kv_load="step"), "deployments[0].kv_load", "without a tier"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5}], enable_prefix_caching=False), "deployments[0].kv_tiers",
     "enable_prefix_caching is false"),
    (dict(prefill={"instances": 1, "kv_store": "all"}, decode={"instances": 1}), "deployments[0].prefill.kv_store",
     "without a tier"),
    (dict(kv_tiers=[{"name": "cpu", "blocks": 5}], prefill={"instances": 1, "enable_prefix_caching": False},
          decode={"instances": 1}), "deployments[0].kv_tiers", "in the prefill pool"),
]


@pytest.mark.parametrize("keys,field,words", BAD_ENTRIES, ids=[c[1] + " " + c[2] for c in BAD_ENTRIES])
def test_bad_entries_give_one_line(keys, field, words, tmp_path):
    with pytest.raises(ConfigError) as exc:
        simulate(deployments=[entry(**keys)])
    assert exc.value.field == field and words in exc.value.message
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(deployments(entry(**keys))))
    assert_clean_error(*cli_in_process("run", "--config", path), needles=[field + ": ", words])


def test_entry_sizes_are_checked_when_resolved(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(deployments(entry(kv_tiers=[{"name": "cpu", "bytes": 4096}]))))
    assert_clean_error(*cli_in_process("run", "--config", path),
                       needles=["deployments[0].kv_tiers[0].bytes: ", "smaller than one KV block"])
    cfg = build_config(deployments(entry(prefill={"instances": 1},
                                         decode={"instances": 1, "kv_tiers": [{"name": "cpu", "bytes": 4096}]})))
    with pytest.raises(ConfigError) as exc:
        resolve(cfg)
    assert exc.value.field == "deployments[0].decode.kv_tiers[0].bytes"


def test_the_shorthand_is_refused_with_a_deployments_list(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(deployments()))
    assert_clean_error(*cli_in_process("run", "--config", path, "--kv-cpu-blocks", "100"),
                       needles=["--kv-cpu-blocks: ", "per-deployment setting", "kv_tiers"])
    with pytest.raises(ConfigError) as exc:
        build_config({**deployments(), "kv_tiers": {"store": "all"}})
    assert exc.value.field == "kv_tiers.store" and "kv_store" in exc.value.message


def test_the_list_form_at_top_level_says_where_it_belongs():
    with pytest.raises(ConfigError) as exc:
        build_config({"kv_tiers": [{"name": "cpu", "blocks": 5}]})
    assert exc.value.field == "kv_tiers" and "deployments: entry" in exc.value.message


def test_the_api_objects_check_their_types():
    with pytest.raises(ConfigError) as exc:
        DeploymentSpec(kv_tiers=[TierSpec("cpu", blocks=1)])
    assert exc.value.field == "kv_tiers"
    with pytest.raises(ConfigError) as exc:
        KvTiersSpec(("cpu",))
    assert exc.value.field == "tiers[0]"
    with pytest.raises(ConfigError) as exc:
        KvTiersSpec(store="all")
    assert exc.value.field == "store"
    with pytest.raises(ConfigError) as exc:
        TierSpec("cpu", blocks="5")  # (the API takes typed values)
    assert exc.value.field == "blocks"
    assert KvTiersSpec([TierSpec("cpu", blocks=1)]).tiers == (TierSpec("cpu", blocks=1),)


# hostile values in every place of a tier list: a ConfigError or a valid config, never anything else
TIER_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
              st.sampled_from(["cpu", "disk", "1e12", "1e400", 0, 1, 1e15, 5e-324, "all", "step", "x" * 300])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "blocks", "bytes", "read_gbps", "write_gbps", "latency_us", "bogus"]), inner,
        max_size=4),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.dictionaries(st.sampled_from(["kv_tiers", "kv_store", "kv_load"]), TIER_VALUES, max_size=3),
       st.booleans())
def test_fuzz_tier_entries(keys, in_pool):
    keys = {"prefill": {"instances": 1, **keys}, "decode": {"instances": 1}} if in_pool else keys
    try:
        cfg = build_config(deployments(entry(**keys)))
    except ConfigError as exc:
        assert exc.field.startswith("deployments[0].") and "\n" not in exc.message
        return
    dep = resolved_deployment_or_none(cfg)
    assert dep is None or all(t.blocks >= 1 for p in dep.pools if p.kv_tiers for t in p.kv_tiers.tiers)


def resolved_deployment_or_none(cfg):
    try:
        return resolved_deployment(cfg)
    except ConfigError as exc:
        assert exc.field.startswith("deployments[0].") and "smaller than one KV block" in exc.message
        return None
