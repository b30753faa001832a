"""Shared test builders -- one definition each, imported by the test modules (fixtures live in
conftest.py):

- paths and names: ``ROOT``, ``COMPAT``, ``LLAMA``, ``LLAMA_8B_HF``, ``WORKLOAD_EXAMPLES``;
- the reference's output field lists: ``SUMMARY_HEAD``, ``REQUEST_FIELDS``;
- settings: ``HAND_STEPS``/``BASE`` (hand-computable step times), ``LOADED`` (a loaded
  3-instance run), ``engine_overrides`` (a naive-reference configuration as flat settings);
- workloads: ``random_prompts``, ``prompts_workload``, ``lengths_workload``,
  ``workload_diff``/``same_workload``;
- running: ``sim``, ``sim_base``, ``single``, ``trace_sim``;
- files and the command line: ``write``, ``make_trace``, ``cli`` (fresh process),
  ``run_cli``/``run_main`` (in process), ``invoke`` + ``BOTH_WAYS`` (either),
  ``expect_cli_error``, ``assert_one_error_line``, ``FakeTerminal`` (a stream that is a "terminal");
- numbers: ``trunc``, ``pct``, ``walk_numbers``, ``assert_no_nan``;
- randomized breadth: ``seeds`` (the first few fast, the rest ``slow``);
- references (slow, obviously correct recomputations; they belong in ``tests/naive/``):
  ``brute_force_inversions``, ``quadratic_inversion_pairs``, ``brute_force_hol``,
  ``naive_repeated``, ``assert_kv_recount``.

``blis_fast`` is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import io
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# ============================================================================ paths and names

ROOT = Path(__file__).resolve().parent.parent  # the repository
COMPAT = "blis-2026.02"
LLAMA = "meta-llama/llama-3.1-8b-instruct"
# llama-3.1-8b's HF config.json (the fields blis-fast reads); variants via {**LLAMA_8B_HF, ...}
LLAMA_8B_HF = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
    "torch_dtype": "bfloat16", "vocab_size": 128256,
}
WORKLOAD_EXAMPLES = sorted((ROOT / "configs" / "workloads").glob("*.yaml"))
assert WORKLOAD_EXAMPLES, "no example workload specs under configs/workloads"

# The reference's output fields, in its order (docs/semantics.md §9; BLIS's metrics object and
# per-request records): our summaries and results files must start with them.
SUMMARY_HEAD = [
    "instance_id", "completed_requests", "still_queued", "still_running", "injected_requests",
    "total_input_tokens", "total_output_tokens", "vllm_estimated_duration_s", "responses_per_sec",
    "tokens_per_sec", "e2e_mean_ms", "e2e_p90_ms", "e2e_p95_ms", "e2e_p99_ms", "ttft_mean_ms",
    "ttft_p90_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_mean_ms", "itl_p90_ms", "itl_p95_ms", "itl_p99_ms",
    "scheduling_delay_p99_ms", "preemption_count", "dropped_unservable",
]
REQUEST_FIELDS = ["requestID", "arrived_at", "num_prefill_tokens", "num_decode_tokens", "ttft_ms", "itl_ms",
                  "e2e_ms", "scheduling_delay_ms", "handled_by"]

# ============================================================================ settings

# Blackbox latency with alpha = 0 and beta = (1000, 10, 5): a step takes 1000 + 10·prefill
# tokens + 5·decode requests µs, so every time is computable by hand.
HAND_STEPS = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
# ... plus room for every request and the per-step invariant checks (``sim_base``).
BASE = dict(HAND_STEPS, total_kv_blocks=1000, check_invariants=True)

# A loaded 3-instance run: shared prefix (cache hits), KV pressure (preemptions), batch cap,
# zero-length outputs, alpha overheads; the kernel verifies batch size <= max_num_seqs and
# allocated + free KV blocks = total after every step.
LOADED = dict(
    num_requests=300, rate=40, num_instances=3, total_kv_blocks=80,
    prompt_tokens=300, prompt_tokens_stdev=200, prompt_tokens_min=1, prompt_tokens_max=1500,
    output_tokens=60, output_tokens_stdev=40, output_tokens_min=0, output_tokens_max=300,
    prefix_tokens=64, alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], max_num_seqs=8,
    check_invariants=True,
)
LOADED_HORIZON = 4_000_000  # mid-run: requests pending, queued, running and completed


def engine_overrides(cfg, compat=COMPAT):
    """The flat simulate() settings of a naive_simulate_instance configuration dict."""
    return dict(
        block_size_in_tokens=cfg["block_size"], total_kv_blocks=cfg["total_kv_blocks"],
        max_num_running_reqs=cfg["max_num_seqs"], max_num_scheduled_tokens=cfg["max_batched_tokens"],
        long_prefill_token_threshold=cfg["long_prefill_threshold"], alpha_coeffs=cfg["alpha"],
        beta_coeffs=cfg["beta"], enable_prefix_caching=cfg["prefix_caching"], horizon=cfg["horizon"],
        compat=compat if cfg["compat"] else None, admission_latency=cfg["admission_latency"],
        routing_latency=cfg["routing_latency"], check_invariants=True,
    )


# A FIFO single server for analytic tests: one instance serving one request at a time, no α
# overheads, KV room for everything; with 1-token prompts and beta = (β0, 0, 0) a request with
# N output tokens takes N steps of β0 µs.
SINGLE_SERVER = dict(alpha_coeffs=[0, 0, 0], max_num_seqs=1, total_kv_blocks=200_000, num_instances=1)
ONE_TOKEN_PROMPTS = dict(prompt_tokens=1, prompt_tokens_stdev=0, prompt_tokens_min=1, prompt_tokens_max=1)


def constant_outputs(n: int) -> dict:
    """Settings of exactly ``n`` output tokens per request."""
    return dict(output_tokens=n, output_tokens_stdev=0, output_tokens_min=n, output_tokens_max=n)


# ============================================================================ workloads


def random_prompts(rng, n, bs, n_families, vocab, max_suffix, p_family):
    """n prompts (token-id lists) with natural prefix sharing, for randomized tests: a
    shared prefix family (tiny vocabulary) + suffix, exact repeats (whole-prompt cache
    hits) and block-aligned lengths (where the last-token rule matters)."""
    families = [[int(t) for t in rng.integers(0, vocab, int(rng.integers(0, 3 * bs + 1)))] for _ in range(n_families)]
    prompts = []
    for _ in range(n):
        if prompts and rng.random() < 0.2:  # an exact repeat: a whole-prompt cache hit
            prompts.append(list(prompts[int(rng.integers(0, len(prompts)))]))
            continue
        fam = families[int(rng.integers(0, n_families))] if rng.random() < p_family else []
        p = fam + [int(t) for t in rng.integers(0, vocab, int(rng.integers(0 if fam else 1, max_suffix)))]
        if len(p) > bs and rng.random() < 0.3:  # whole blocks only
            p = p[: len(p) // bs * bs]
        prompts.append(p)
    return prompts


def prompts_workload(arrivals, prompts, outputs, bs=16, **attrs):
    """A Workload from explicit prompt token lists; ``attrs`` (tenant=, slo_class=, ...) are
    int32 columns."""
    import dataclasses

    from blis_fast.workload import Workload

    toks = [np.asarray(p, np.int64) for p in prompts]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in toks])]).astype(np.int64)
    tokens = np.concatenate(toks) if toks else np.zeros(0, np.int64)
    wl = Workload.from_tokens(np.asarray(arrivals, np.int64), tokens, offsets, np.asarray(outputs, np.int64), bs)
    if attrs:
        wl = dataclasses.replace(wl, **{k: np.asarray(v, np.int32) for k, v in attrs.items()})
    return wl


def lengths_workload(arrivals, lens, outputs, bs=16, seed=99, *, prefixes=None, **attrs):
    """A Workload of random prompts with the given lengths: request i's prompt is
    ``prefixes[i]`` (token ids; none by default) followed by distinct random token ids."""
    rng = np.random.default_rng(seed)
    prompts = []
    for i, n in enumerate(lens):
        pre = np.asarray(prefixes[i] if prefixes is not None else [], np.int64)
        prompts.append(np.concatenate([pre, rng.integers(0, 128_000, int(n) - len(pre))]))
    return prompts_workload(arrivals, prompts, outputs, bs, **attrs)


WORKLOAD_ARRAYS = ("arrival_us", "prompt_len", "output_len", "block_keys", "key_offsets")
# the per-request labels and closed-loop links of spec workloads and rich traces
WORKLOAD_LABELS = ("tenant", "slo_class", "priority_class", "client", "session", "turn", "next_request",
                   "follow_delay_us", "names", "slo_targets", "block_size")


def workload_diff(a, b, extra=()) -> list[str]:
    """The attributes (``WORKLOAD_ARRAYS`` + ``extra``) in which two Workloads differ."""
    def equal(x, y):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return x is not None and y is not None and np.array_equal(x, y)
        return x == y

    return [f for f in (*WORKLOAD_ARRAYS, *extra) if not equal(getattr(a, f), getattr(b, f))]


def same_workload(a, b, extra=()) -> bool:
    return not workload_diff(a, b, extra)


# ============================================================================ running


def sim(workload=None, **kw):
    """``blis_fast.simulate`` with the per-step invariant checks on (unless kw says otherwise)."""
    import blis_fast

    kw.setdefault("check_invariants", True)
    return blis_fast.simulate(workload=workload, **kw)


def sim_base(workload=None, **kw):
    """``sim`` with the ``BASE`` settings (hand-computable step times), kw overriding them."""
    return sim(workload, **{**BASE, **kw})


def single(L, N, alpha, beta, arrival=0, **kw):
    """``sim`` of one request (prompt L, output N) with explicit blackbox coefficients."""
    return sim(lengths_workload([arrival], [L], [N]), alpha_coeffs=list(alpha), beta_coeffs=list(beta), **kw)


def trace_sim(path, **kw):
    """Simulate a BLIS trace file (the workload type goes through the config dict: the flat
    ``workload=`` keyword is simulate()'s Workload parameter)."""
    import blis_fast

    return blis_fast.simulate({"workload": {"type": "traces", "traces_filepath": str(path)}}, **kw)


# ============================================================================ files, command line


def write(directory: Path, name: str, content) -> Path:
    """Write ``directory/name``: a str as UTF-8 text (newlines kept as given), anything else
    as YAML (keys in the given order)."""
    if not isinstance(content, str):
        import yaml

        content = yaml.safe_dump(content, sort_keys=False)
    p = Path(directory) / name
    p.write_bytes(content.encode("utf-8"))
    return p


def make_trace(path: Path, n: int = 40, seed: int = 1, arrival_step_s: float = 0.05) -> Path:
    """A BLIS trace CSV of n requests: increasing arrivals, every third prompt starting with
    a shared 48-token prefix, source ids ``src-<i>``."""
    from blis_fast.workload import write_blis_trace

    rng = np.random.default_rng(seed)
    arrival_s = np.round(np.cumsum(rng.uniform(0, 2 * arrival_step_s, n)), 7)
    shared = rng.integers(0, 128_000, 48)
    prompts = [np.concatenate([shared if i % 3 == 0 else [], rng.integers(0, 128_000, int(rng.integers(5, 600)))])
               .astype(np.int64) for i in range(n)]
    outputs = [rng.integers(0, 128_000, int(rng.integers(1, 60))) for _ in range(n)]
    write_blis_trace(path, arrival_s, prompts, outputs, request_ids=[f"src-{i}" for i in range(n)])
    return path


def default_sigint() -> None:
    """``preexec_fn`` of a child that the test interrupts: SIGINT back to its default.  A test
    run started as a background job of a non-interactive shell inherits SIGINT *ignored*,
    and Python then leaves it ignored (as a program started with ``nohup`` should)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(*args, cwd=None, env=None, timeout=300):
    """Run ``python -m blis_fast.cli`` in a fresh process (mark such tests slow)."""
    return subprocess.run([sys.executable, "-m", "blis_fast.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``blis_fast.cli.main`` in this process: (exit code, stdout, stderr)."""
    from blis_fast.cli import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


# Run a CLI test in this process (fast) and in a fresh process (slow): ``invoke(mode, ...)``.
BOTH_WAYS = pytest.mark.parametrize("mode", ["in-process", pytest.param("subprocess", marks=pytest.mark.slow)])


def invoke(mode: str, capsys, *args) -> tuple[int, str, str]:
    """``blis-fast *args`` in this process or a fresh one (``BOTH_WAYS``): (exit code, stdout, stderr)."""
    if mode == "subprocess":
        p = cli(*args)
        return p.returncode, p.stdout, p.stderr
    return run_cli(capsys, *args)


def run_main(capsys, *args) -> dict:
    """``blis-fast run *args`` in this process; its JSON summary."""
    import json

    code, out, err = run_cli(capsys, "run", *args)
    assert code == 0, err
    return json.loads(out)


def expect_cli_error(capsys, *args, needles=()) -> str:
    """``blis-fast *args`` in this process fails as a user error: exit 2, nothing on stdout,
    one ``error:`` line with every needle (returned)."""
    code, out, err = run_cli(capsys, *args)
    assert code == 2, (code, out[-500:], err[-2000:])
    assert out == ""
    return assert_one_error_line(err, needles)


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal (stdout / stderr of a person's session)."""

    def isatty(self) -> bool:
        return True


def assert_one_error_line(err: str, needles=()) -> str:
    """A user error's stderr: one line ``error: ...`` containing every needle, no traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ============================================================================ numbers


def trunc(x: float) -> int:
    return int(x)  # float -> int toward zero


def pct(values_us, p):
    """numpy's (linear) percentile of µs values, in ms; 0 for no values."""
    return float(np.percentile(values_us, p)) / 1000.0 if len(values_us) else 0.0


def walk_numbers(obj, path="$"):
    """Yield (path, value) of every number inside a JSON-like object."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk_numbers(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from walk_numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float, np.integer, np.floating)) and not isinstance(obj, bool):
        yield path, obj


def assert_no_nan(obj):
    bad = [(p, v) for p, v in walk_numbers(obj) if not math.isfinite(float(v))]
    assert not bad, bad[:5]


# ============================================================================ randomized breadth


def seeds(n: int, fast: int = 2) -> list:
    """``range(n)`` as test parameters with all but the first ``fast`` marked slow: the fast
    suite keeps a representative of each randomized comparison, the full suite (CI) its breadth."""
    return [seed if seed < fast else pytest.param(seed, marks=pytest.mark.slow) for seed in range(n)]


def doc_commands(page: str) -> list[list[str]]:
    """The commands of a docs page's bash blocks (``page``: a path under docs/), as argument
    lists: continuation lines joined, comments dropped."""
    text = (Path(__file__).parents[1] / "docs" / page).read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                out.append(shlex.split(line))
    return out
