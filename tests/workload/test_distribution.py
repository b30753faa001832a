"""Synthetic distribution workloads and presets (docs/semantics.md §7, §10)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blis_fast.errors import ConfigError
from blis_fast.rng import subsystem_rng
from blis_fast.workload import (
    PRESETS,
    DistributionSpec,
    constant_gap_us,
    generate_distribution,
    load_preset,
    preset_spec,
    round_half_away,
    sample_lengths,
)
from builders import WORKLOAD_ARRAYS, same_workload


def spec(**kw) -> DistributionSpec:
    base = dict(
        rate=50.0, num_requests=200, prompt_tokens=100, prompt_tokens_stdev=30,
        prompt_tokens_min=10, prompt_tokens_max=300, output_tokens=50, output_tokens_stdev=20,
        output_tokens_min=1, output_tokens_max=200,
    )
    base.update(kw)
    return DistributionSpec(**base)


# --- lengths -----------------------------------------------------------------------------
def test_round_half_away_from_zero():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4999999, 0.49999999999999994, 3.0, -1.2])
    assert round_half_away(x).tolist() == [1, 2, 3, -1, -3, 2, 0, 3, -1]


def test_lengths_within_clamps():
    wl = generate_distribution(spec(num_requests=5000, prompt_tokens_stdev=500, output_tokens_stdev=500), 3, 16)
    assert wl.prompt_len.min() >= 10 and wl.prompt_len.max() <= 300
    assert wl.output_len.min() >= 1 and wl.output_len.max() <= 200
    # the clamps are hit with these wide stdevs
    assert wl.prompt_len.min() == 10 and wl.prompt_len.max() == 300


def test_length_moments_when_clamps_are_far():
    x = sample_lengths(subsystem_rng(0, "t"), 50000, 1000.0, 100.0, 1, 100000)
    assert x.dtype == np.int64
    assert abs(x.mean() - 1000) < 3 * 100 / np.sqrt(50000) + 0.01
    assert abs(x.std() - 100) < 1.5  # rounding adds variance 1/12, negligible


def test_constant_lengths():
    assert sample_lengths(subsystem_rng(0, "t"), 5, 7.0, 3.0, 4, 4).tolist() == [4] * 5  # min == max
    assert sample_lengths(subsystem_rng(0, "t"), 3, 2.5, 0.0, 1, 9).tolist() == [3] * 3  # stdev 0, half up
    assert sample_lengths(subsystem_rng(0, "t"), 3, 9.6, 0.0, 1, 9).tolist() == [9] * 3  # clamped


def test_rounding_of_samples_is_half_away_from_zero():
    class FakeRng:
        def standard_normal(self, n):
            return np.array([0.5, -0.5, 1.5, 0.49])[:n]

    assert sample_lengths(FakeRng(), 4, 10.0, 1.0, 1, 100).tolist() == [11, 10, 12, 10]


# --- arrivals ----------------------------------------------------------------------------
def test_constant_spacing_exact():
    wl = generate_distribution(spec(arrival="constant", rate=3.0, num_requests=1000), 1, 16)
    assert wl.arrival_us[0] == 0
    assert np.array_equal(wl.arrival_us, np.arange(1000) * 333333)


def test_constant_gap_follows_blis_float_expression():
    # BLIS computes int64(1 / (rate / 1e6)), which is one µs short of 1e6/rate at some rates
    assert constant_gap_us(10.0) == 99999
    assert constant_gap_us(3.0) == 333333
    assert constant_gap_us(4.0) == 250000
    assert constant_gap_us(1e7) == 1  # at least 1 µs


def test_poisson_gaps():
    rate = 100.0
    wl = generate_distribution(spec(rate=rate, num_requests=50000), 11, 16)
    a = wl.arrival_us
    assert a[0] > 0  # first request at the first gap, as BLIS's PoissonSampler
    gaps = np.diff(np.concatenate(([0], a)))
    assert gaps.min() >= 1
    assert abs(gaps.mean() - 1e6 / rate) < 0.02 * 1e6 / rate
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.03


def test_poisson_rejects_overflowing_clock():
    with pytest.raises(ConfigError, match="rate"):
        generate_distribution(spec(rate=1e-12, num_requests=10), 0, 16)


# --- determinism and stream isolation ------------------------------------------------------
def test_same_seed_same_workload():
    a = generate_distribution(spec(prefix_tokens=20), 42, 16)
    b = generate_distribution(spec(prefix_tokens=20), 42, 16)
    assert same_workload(a, b)
    c = generate_distribution(spec(prefix_tokens=20), 43, 16)
    assert not np.array_equal(a.arrival_us, c.arrival_us)
    assert not np.array_equal(a.block_keys[:5], c.block_keys[:5])


def test_output_params_do_not_move_arrivals_or_prompts():
    a = generate_distribution(spec(), 5, 16)
    b = generate_distribution(spec(output_tokens=120, output_tokens_stdev=5, output_tokens_max=150), 5, 16)
    assert np.array_equal(a.arrival_us, b.arrival_us)
    assert np.array_equal(a.prompt_len, b.prompt_len)
    assert all(np.array_equal(a.prompt_keys_of(i), b.prompt_keys_of(i)) for i in range(len(a)))
    assert not np.array_equal(a.output_len, b.output_len)


def test_arrival_kind_does_not_move_lengths():
    a = generate_distribution(spec(), 5, 16)
    b = generate_distribution(spec(arrival="constant"), 5, 16)
    assert np.array_equal(a.prompt_len, b.prompt_len) and np.array_equal(a.output_len, b.output_len)
    assert np.array_equal(a.block_keys, b.block_keys)


# --- prefix ------------------------------------------------------------------------------
def test_shared_prefix_shares_leading_keys_only():
    bs, prefix = 16, 40
    wl = generate_distribution(spec(prefix_tokens=prefix, num_requests=50), 8, bs)
    assert np.all(wl.prompt_len >= prefix + 10)
    assert np.array_equal(np.diff(wl.key_offsets), (wl.prompt_len + wl.output_len) // bs)
    first = wl.keys_of(0)
    n_shared = prefix // bs
    for i in range(1, len(wl)):
        k = wl.keys_of(i)
        assert np.array_equal(k[:n_shared], first[:n_shared])
        assert k[n_shared] != first[n_shared]  # block 2 mixes prefix and private tokens
    later = np.concatenate([wl.keys_of(i)[n_shared:] for i in range(len(wl))])
    assert np.unique(later).size == later.size


def test_no_prefix_no_shared_keys():
    wl = generate_distribution(spec(num_requests=100), 2, 16)
    assert np.unique(wl.block_keys).size == wl.block_keys.size
    assert not np.any(wl.block_keys == -1)


def test_workload_of_more_requests_than_int32_ids_is_refused():
    """The event heap keeps request ids as int32: a workload has at most 2^31 - 1 requests
    (a zero-stride array stands for the 2^31 arrival times)."""
    wl = generate_distribution(spec(num_requests=3), 4, 8)
    huge = dataclasses.replace(wl, arrival_us=np.broadcast_to(np.int64(0), (2**31,)))
    with pytest.raises(ConfigError) as ei:
        huge.validate()
    assert ei.value.field == "workload" and "2147483648 requests" in str(ei.value)


def test_workload_shape_and_description():
    wl = generate_distribution(spec(num_requests=30), 4, 8)
    wl.validate()
    assert len(wl) == 30 and wl.block_size == 8 and wl.source_ids is None
    assert wl.request_ids[:2] == ["request_0", "request_1"]
    assert wl.description["kind"] == "distribution" and wl.description["seed"] == 4
    for f in WORKLOAD_ARRAYS:
        assert getattr(wl, f).dtype == np.int64, f


# --- validation --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field,value",
    [
        ("rate", 0.0), ("rate", -1.0), ("rate", float("nan")), ("rate", float("inf")), ("rate", "5"),
        ("num_requests", 0), ("num_requests", 2.5), ("num_requests", True),
        ("prefix_tokens", -1),
        ("prompt_tokens", float("nan")), ("prompt_tokens", 5),  # below min 10
        ("prompt_tokens_stdev", -1.0), ("prompt_tokens_stdev", float("inf")),
        ("prompt_tokens_min", 0), ("prompt_tokens_min", 301),
        ("prompt_tokens_max", 0),
        ("output_tokens", 1000.0), ("output_tokens_stdev", -0.5),
        ("output_tokens_min", -1), ("output_tokens_min", 201),
        ("arrival", "gamma"),
    ],
)
def test_invalid_field_raises_config_error_naming_it(field, value):
    s = dataclasses.replace(spec(), **{field: value})
    with pytest.raises(ConfigError) as ei:
        s.validate()
    assert ei.value.field == f"workload.{field}"
    assert field in str(ei.value)
    with pytest.raises(ConfigError):
        generate_distribution(s, 0, 16)


def test_output_min_zero_is_allowed():
    wl = generate_distribution(spec(output_tokens=0, output_tokens_min=0, output_tokens_max=0), 0, 16)
    assert np.all(wl.output_len == 0)


def test_bad_block_size():
    with pytest.raises(ConfigError, match="block_size"):
        generate_distribution(spec(), 0, 0)


# --- presets -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_and_generate(name):
    params = load_preset(name)
    assert params["prefix_tokens"] >= 0
    s = preset_spec(name, rate=5.0, num_requests=20)
    assert s.prompt_tokens == params["prompt_tokens"]
    wl = generate_distribution(s, 0, 16)
    assert len(wl) == 20
    assert wl.prompt_len.min() >= params["prompt_tokens_min"] + params["prefix_tokens"]


def test_chatbot_preset_values():
    assert load_preset("chatbot") == dict(
        prefix_tokens=0, prompt_tokens=256, prompt_tokens_stdev=100, prompt_tokens_min=2,
        prompt_tokens_max=800, output_tokens=256, output_tokens_stdev=100, output_tokens_min=1,
        output_tokens_max=1024,
    )


def test_multidoc_missing_prefix_defaults_to_zero():
    assert load_preset("multidoc")["prefix_tokens"] == 0


def test_unknown_preset_lists_known_names():
    with pytest.raises(ConfigError) as ei:
        load_preset("chatbots")
    assert ei.value.field == "workload"
    for name in ("chatbot", "contentgen", "summarization", "multidoc", "distribution", "traces"):
        assert name in str(ei.value)
    with pytest.raises(ConfigError):
        preset_spec("nope", 1.0, 10)
