"""``blis-fast openevolve init DIR``: a ready-to-run OpenEvolve project on blis-fast.

Writes ``evaluator.py`` (the one-line evaluation file), ``scenarios.yaml`` (its scenarios:
a short stage-1 scenario first), ``config.yaml`` (YAML programs) and ``config_python.yaml``
(``.py`` programs, SEARCH/REPLACE diffs inside the EVOLVE-BLOCK), and the seed programs
``initial_program.yaml`` and ``initial_program.py``, and ``initial_program_expression.yaml``
(a routing expression: start from it to evolve formulas).  Existing files are never
overwritten.  Run with ``openevolve-run DIR/initial_program.yaml DIR/evaluator.py
--config DIR/config.yaml`` (an LLM endpoint is needed for evolution itself)."""

from __future__ import annotations

from pathlib import Path

from blis_fast.config.outputs import write_new_files

SHIM = ("from blis_fast.adapters.openevolve import evaluators_for; "
        "evaluate, evaluate_stage1, evaluate_stage2 = evaluators_for(__file__)\n")

SCENARIOS = """\
# Scenarios of this OpenEvolve project (format: blis-fast's docs/batch.md).  Stage 1 of the
# cascade runs only the FIRST scenario: keep it short.  Change freely; paths are relative
# to this file.
objectives: "slo_attainment:max,ttft_p99_ms:min:300,e2e_p99_ms:min"
budget:
  max_simulated_s: 600
  max_wall_s: 20            # per scenario; keep evaluator.timeout in config.yaml above the total
scenarios:
  - name: quick             # stage 1: a cheap gate
    config: {num_instances: 2, workload: chatbot, prefix_tokens: 256, rate: 120, num_requests: 300}
    seed: 1
    slo_classes: {default: {ttft_ms: 300, tpot_ms: 40}}
  - name: busy
    config: {num_instances: 4, workload: chatbot, prefix_tokens: 256, rate: 290, num_requests: 1500}
    seed: 2
    slo_classes: {default: {ttft_ms: 300, tpot_ms: 40}}
  - name: long-prompts
    config: {num_instances: 4, workload: summarization, rate: 40, num_requests: 400}
    seed: 3
    slo_classes: {default: {ttft_ms: 2000}}
"""

PROGRAM_YAML = """\
# A blis-fast policy bundle (docs/policies.md).  Sections: admission (always-admit |
# token-bucket {capacity, refill_rate}), routing (round-robin | least-loaded | weighted
# {scorers: queue-depth, kv-utilization, load-balance, prefix-affinity} | prefix-affinity),
# priority (constant | slo-based | inverted-slo {slo_class_weights}), scheduler (fcfs |
# priority-fcfs | sjf | sort {priority, arrival, prompt_len, output_len}), preemption
# {victim: last | lowest-priority}, and for scenarios with autoscaled pools autoscale
# (policy: threshold {signal, up, down} | target {signal, target} | saturation {kv_up,
# kv_down}; signal: kv_utilization | waiting | in_flight | arrival_rate | ttft_p90_ms |
# slo_attainment), and flow_control (policy: never | concurrency {concurrency_limit} |
# utilization {queue_threshold, kv_threshold} | free-slot | expression (below); each but never also
# {dispatch_order: fifo | priority | deadline, fairness: strict | round-robin}).
# EVOLVE-BLOCK-START
routing:
  type: weighted
  params:
    scorers: {queue-depth: 1.0, kv-utilization: 1.0, prefix-affinity: 1.0}
scheduler: fcfs
# EVOLVE-BLOCK-END
"""

PROGRAM_PY = '''\
"""A blis-fast policy program: get_policy() returns a policy bundle (docs/policies.md).
Only the EVOLVE-BLOCK changes; it runs in a child process with a time and memory limit."""

# EVOLVE-BLOCK-START
ROUTING_SCORERS = {"queue-depth": 1.0, "kv-utilization": 1.0, "prefix-affinity": 1.0}
SCHEDULER = "fcfs"  # fcfs | priority-fcfs | sjf


def routing():
    return {"type": "weighted", "params": {"scorers": dict(ROUTING_SCORERS)}}
# EVOLVE-BLOCK-END


def get_policy():
    return {"routing": routing(), "scheduler": SCHEDULER}
'''

# the expression seed's formula: least load first, prefix hits as a tie-breaker worth up to half a request
SEED_EXPRESSION = "-load + 0.5 * hit_blocks / (1 + request_blocks)"


def program_expression_yaml() -> str:
    """The expression seed ``initial_program_expression.yaml``: the routing as a formula
    over the router's features (listed in its comment block, from
    ``blis_fast.config.expression.FEATURES``, so they never drift from the compiler's)."""
    from blis_fast.config.expression import ALLOWED_SYNTAX, FEATURES  # deferred: numpy and the kernel schema
    from blis_fast.config.policy import PROGRAM_FORMS  # deferred: as above

    def wrapped(prefix: str, text: str) -> list[str]:  # comment lines of at most ~92 characters
        lines, line = [], prefix
        for word in text.split(" "):
            if len(line) + len(word) > 92:
                lines.append(line.rstrip())
                line = "#   "
            line += word + " "
        return lines + [line.rstrip()]

    comment = [
        "# A blis-fast policy bundle whose routing is an expression (docs/policies.md, \"Expression and",
        "# tree policies\"): each instance gets the score, the highest wins (ties: the lowest index).",
        *wrapped("# Syntax: ", ALLOWED_SYNTAX),
        *wrapped("# Routing features: ", ", ".join(FEATURES["routing"])),
        "# Any other slot can hold a program too (or a tree: tree instead of expression, tree: {...}):",
        *(line for slot, (form, meaning) in PROGRAM_FORMS.items() if slot != "routing"
          for line in wrapped(f"#   {form}: {meaning}; features: ", ", ".join(FEATURES[slot]))),
    ]
    return "\n".join(comment) + f"""
# EVOLVE-BLOCK-START
routing:
  type: expression
  score: "{SEED_EXPRESSION}"
scheduler: fcfs
# EVOLVE-BLOCK-END
"""


_SYSTEM = ("You improve request-routing and scheduling policies of an LLM inference cluster simulated by blis-fast. "
           "A candidate is a policy bundle; the feedback lists each objective, its target and whether it was met, "
           "and a summary of the run's main problems. Keep the program valid: misspelled names or non-finite "
           "numbers score 0.")


def config_text(language: str, workers: int) -> str:
    """OpenEvolve 0.4.0 config for YAML (full rewrites) or Python (diffs in the block)."""
    python = language == "python"
    return f"""\
# OpenEvolve configuration for blis-fast {'.py policy programs' if python else 'YAML policy bundles'}
# (openevolve-run initial_program{'.py' if python else '.yaml'} evaluator.py --config {'config_python.yaml' if python else 'config.yaml'}).
max_iterations: 100
random_seed: 42
language: {language}
file_suffix: {'.py' if python else '.yaml'}
diff_based_evolution: {'true' if python else 'false'}
enforce_evolve_blocks: {'true' if python else 'false'}
max_code_length: 10000
llm:
  api_base: https://api.openai.com/v1   # any OpenAI-compatible endpoint
  models:
    - name: gpt-4o-mini
      weight: 1.0
  temperature: 0.7
prompt:
  system_message: "{_SYSTEM}"
  include_artifacts: true
database:
  population_size: 200
  num_islands: 2
  random_seed: 42
  feature_dimensions: [slo_attainment, utilization_imbalance]   # raw metrics our evaluator returns
  feature_bins: 10
  max_snapshot_artifacts: null   # every parent keeps its feedback
evaluator:
  timeout: 300                   # above the scenarios' own budget (max_wall_s per scenario)
  max_retries: 0                 # the simulator is deterministic: a retry gives the same result
  cascade_evaluation: true
  cascade_thresholds: [0.3, 0.6]
  parallel_evaluations: {workers}   # worker processes: at most the cores
"""


def write_starter(directory: str | Path) -> list[Path]:
    """Write the starter files into ``directory`` (created if missing), all or nothing
    (``blis_fast.config.outputs.write_new_files``); ConfigError naming DIR if one of the
    names exists already (a symlink too), the path is too long or the folder cannot be
    written."""
    from blis_fast.batch.evaluate import default_workers  # deferred: yaml

    d = Path(directory)
    files = {
        "evaluator.py": SHIM,
        "scenarios.yaml": SCENARIOS,
        "config.yaml": config_text("yaml", min(default_workers(), 2)),
        "config_python.yaml": config_text("python", min(default_workers(), 2)),
        "initial_program.yaml": PROGRAM_YAML,
        "initial_program.py": PROGRAM_PY,
        "initial_program_expression.yaml": program_expression_yaml(),
    }
    return write_new_files(d, files, "DIR")
