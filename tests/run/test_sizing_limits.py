"""Table sizing: limits that would overflow the schema are errors, and large KV caches do
not blow up memory (tables are sized by what the workload can use)."""

import pytest

import blis_fast
from blis_fast.config.sim import build_config
from blis_fast.run import build_state, build_workload, resolve


def test_more_than_2_31_kv_blocks_is_a_config_error():
    with pytest.raises(blis_fast.ConfigError, match="2\\^31"):
        blis_fast.simulate(num_instances=2000, total_kv_blocks=2_000_000, num_requests=3)


def test_prefix_table_sized_by_workload_keys():
    """An instance's prefix hash table holds shared keys only (keys no other request carries
    use direct slots), at most one per block: huge KV caches cost no table memory."""
    cfg = build_config({}, {"num_instances": 4, "total_kv_blocks": 1_000_000, "num_requests": 10,
                            "prefix_tokens": 64})
    wl = build_workload(cfg)
    n_shared = int(wl.shared_keys().sum())
    assert 0 < n_shared < len(wl.block_keys)
    st = build_state(resolve(cfg), wl)
    per_instance = st.inst[0]["ht_mask"] + 1
    assert per_instance >= 2 * n_shared
    assert per_instance < 4 * n_shared + 4
    assert st.kv_slot.shape == wl.block_keys.shape
