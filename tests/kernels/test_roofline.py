"""Step-time kernels (kernels/latency/steptime.py): roofline reference values (docs/semantics.md §5),
cross-check with tests/naive/latency.py, blackbox trunc."""

import numpy as np
import pytest

import entry as st
from blis_fast.config import load_hardware, load_model_config, roofline_params
from blis_fast_kernels.schema import N_ROOFLINE, Roofline
from naive.latency import naive_blackbox_us
from naive.latency import naive_roofline_us as naive_step

BETA = np.array([5752.705191348184, 17.25086436834028, 5.999143920128404])

# (prefill entries (s, t), decode contexts) -> (TP1 µs, TP2 µs)
REFERENCE = [
    ([(0, 512)], [], 12367, 8033),
    ([(2048, 1452)], [], 36147, 19924),
    ([], [600], 6960, 5330),
    ([(0, 300)], [400, 1000], 13554, 8627),
    ([], [], 1140, 2420),
]


def step(params, prefills, decodes):
    pre = np.zeros(3)
    dec = np.zeros(3)
    for s, t in prefills:
        pre += np.array(st.roofline_entry(params, s, t))
    for s in decodes:
        dec += np.array(st.roofline_entry(params, s, 1))
    return st.roofline_step_us(params, pre[0], pre[1], pre[2], len(prefills),
                               dec[0], dec[1], dec[2], len(decodes))


@pytest.fixture(scope="module")
def llama():
    return load_model_config("llama-3.1-8b-instruct"), load_hardware("H100")


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("prefills,decodes,us_tp1,us_tp2", REFERENCE)
def test_reference_values(llama, tp, prefills, decodes, us_tp1, us_tp2):
    model, hw = llama
    params = roofline_params(model, hw, tp)
    expected = us_tp1 if tp == 1 else us_tp2
    assert step(params, prefills, decodes) == expected
    assert naive_step(model, hw, tp, prefills, decodes) == expected


def test_matches_naive_on_random_batches(llama):
    model, hw = llama
    rng = np.random.default_rng(7)
    for tp in (1, 2, 4, 8):
        params = roofline_params(model, hw, tp)
        for _ in range(50):
            pre = [(int(rng.integers(0, 8000)), int(rng.integers(2, 2048))) for _ in range(rng.integers(0, 4))]
            dec = [int(rng.integers(1, 16000)) for _ in range(rng.integers(0, 64))]
            assert abs(step(params, pre, dec) - naive_step(model, hw, tp, pre, dec)) <= 1


def test_param_vector_layout(llama):
    model, hw = llama
    p = roofline_params(model, hw, 2)
    assert p.dtype == np.float64 and p.shape == (N_ROOFLINE,)
    assert p[Roofline.LAYERS] == 32 and p[Roofline.TP] == 2 and p[Roofline.KV_DIM] == 1024
    assert p[Roofline.ALLREDUCE_US] == 2 * 32 * 20.0
    assert roofline_params(model, hw, 1)[Roofline.ALLREDUCE_US] == 0.0


def test_moe_flops_active_memory_all():
    mix = load_model_config("mixtral-8x7b-v0.1")
    hw = load_hardware("H100")
    p = roofline_params(mix, hw, 1)
    assert p[Roofline.MLP_WIDTH_ACTIVE] == 2 * 14336
    assert p[Roofline.WEIGHT_BYTES] == mix.layer_weight_bytes
    assert mix.layer_weight_bytes > 0.95 * mix.weight_bytes  # every expert streamed
    gemm_one_token = st.roofline_entry(p, 0, 1)[0]
    assert gemm_one_token == pytest.approx(2 * (mix.active_params - mix.embedding_params), rel=1e-9)


def test_prefill_monotone_in_tokens(llama):
    params = roofline_params(*llama, 1)
    times = [step(params, [(0, t)], []) for t in (16, 256, 1024, 4096)]
    assert times == sorted(times)


# ---- blackbox ---------------------------------------------------------------------------

def test_blackbox_exact_trunc():
    x = 5752.705191348184 + 17.25086436834028 * 512 + 5.999143920128404 * 0
    assert 14585 < x < 14586
    assert st.blackbox_step_us(*BETA, 512, 0) == 14585


@pytest.mark.parametrize("p,d", [(0, 0), (1, 0), (0, 1), (512, 7), (2048, 255), (123457, 1000)])
def test_blackbox_matches_python(p, d):
    assert st.blackbox_step_us(*BETA, p, d) == int(BETA[0] + BETA[1] * float(p) + BETA[2] * float(d))
    assert st.blackbox_step_us(*BETA, p, d) == naive_blackbox_us(BETA, p, d)


def test_blackbox_truncates_toward_zero():
    assert st.blackbox_step_us(*[10.99, 0.0, 0.0], 5, 5) == 10
    assert st.blackbox_step_us(*[-0.5, 0.0, 0.0], 0, 0) == 0
    assert st.blackbox_step_us(*[0.0, 0.5, 0.25], 3, 1) == 1


def test_alpha_delays():
    alpha = np.array([232.46191091038054, 1.752360364195244, 3357.4400353290152])
    assert st.queueing_delay_us(alpha[0], alpha[1], 100) == int(232.46191091038054 + 1.752360364195244 * 100.0)
    assert st.output_token_delay_us(alpha[2]) == 3357
    assert st.queueing_delay_us(0.0, 0.0, 1000) == 0


def test_round_half_away_from_zero():
    p = np.zeros(N_ROOFLINE)
    p[Roofline.STEP_OVERHEAD_US] = 2.5
    assert st.roofline_step_us(p, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0) == 3
    p[Roofline.STEP_OVERHEAD_US] = 2.4999999
    assert st.roofline_step_us(p, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0) == 2
