"""The expression-search demo (docs/expression-search.md): on the scenarios of
``configs/evaluate/expression-demo.yaml``, the best weighted-scorer routing of a grid (each
of the four scorer weights in {0, 1, 2, 4}, not all zero) and the template routings
least-loaded and prefix-affinity against one nonlinear routing expression.  Deterministic:
the same scores on every run.

    python -m blis_fast.studies.expression_demo            # the whole grid (255 settings)
    python -m blis_fast.studies.expression_demo --quick    # a few settings (the test's budget)
"""

from __future__ import annotations

import itertools
import sys

from blis_fast.config.validate import show
from blis_fast.paths import configs_dir

SCORERS = ("queue-depth", "kv-utilization", "load-balance", "prefix-affinity")
GRID_WEIGHTS = (0, 1, 2, 4)
# a quick grid: the three best settings of the full grid, and the plain ones
QUICK_GRID = ((0, 1, 1, 2), (0, 1, 2, 2), (0, 1, 2, 4), (1, 0, 0, 0), (0, 0, 0, 1), (1, 0, 0, 4))
BEST_WEIGHTS = (0, 1, 1, 2)  # the full grid's best (docs/expression-search.md has the table)
# BEST_WEIGHTS written as a formula (the weighted router's score up to a constant factor and the
# clamping, which these features never reach): the search's starting point
BEST_WEIGHTS_FORMULA = "2*hit_blocks/request_blocks + (1 - kv_utilization) + 1/(1 + load)"
# the winning expression (docs/expression-search.md: why it wins)
WINNING_EXPRESSION = "2*hit_blocks/request_blocks + (1 - kv_utilization) + 1/(1 + running) + 1/(1 + queue)**2"


def demo_scenarios() -> str:
    """The demo's scenarios file."""
    return str(configs_dir() / "evaluate" / "expression-demo.yaml")


def weighted_routing(weights) -> str:
    """The routing component (bundle YAML) of weighted scorers ``weights`` (in SCORERS order)."""
    scorers = ", ".join(f"{name}: {w}" for name, w in zip(SCORERS, weights) if w)
    return f"{{type: weighted, params: {{scorers: {{{scorers}}}}}}}"


def expression_routing(expression: str) -> str:
    """The routing component (bundle YAML) of a routing expression."""
    return f'{{type: expression, score: "{expression}"}}'


def grid(quick: bool = False) -> list[tuple]:
    """The weighted settings compared: every weight vector of GRID_WEIGHTS^4 but all zero."""
    if quick:
        return list(QUICK_GRID)
    return [w for w in itertools.product(GRID_WEIGHTS, repeat=len(SCORERS)) if any(w)]


def compare(quick: bool = False, workers: int | None = None) -> dict:
    """Mean scores over the demo's scenarios: ``{"weighted": [(weights, score), ...] best
    first, "templates": {name: score}, "expression": score}``."""
    from blis_fast.adapters.core import FitnessSet  # deferred: the batch evaluator

    fitness = FitnessSet(demo_scenarios(), workers=workers)

    def score(routing: str) -> float:
        results = fitness.run({"routing": routing})
        return sum(ev.score for ev in results) / len(results)

    weighted = sorted(((w, score(weighted_routing(w))) for w in grid(quick)), key=lambda x: (-x[1], x[0]))
    templates = {name: score(name) for name in ("least-loaded", "prefix-affinity")}
    templates["best weights as a formula"] = score(expression_routing(BEST_WEIGHTS_FORMULA))
    return {"weighted": weighted, "templates": templates,
            "expression": score(expression_routing(WINNING_EXPRESSION))}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    unknown = [a for a in argv if a != "--quick"]
    if unknown:
        print(f"error: arguments: only --quick is accepted, got {show(unknown[0])}", file=sys.stderr)
        return 2
    out = compare(quick=bool(argv))
    print("weights (" + ", ".join(SCORERS) + ")  score")
    for w, s in out["weighted"][:10]:
        print(f"  {w}  {s:.4f}")
    for name, s in out["templates"].items():
        print(f"{name}  {s:.4f}")
    print(f"expression {WINNING_EXPRESSION!r}  {out['expression']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
