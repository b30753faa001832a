"""Batch evaluation of policy candidates (fitness at scale): ``evaluate_many`` runs every
candidate on every scenario on every core and returns one row per pair; ``Budget`` ends
runaway evaluations; ``Scenario`` describes where candidates are judged."""

from blis_fast.batch.budget import Budget, BudgetExceeded
from blis_fast.batch.candidates import Candidate, load_candidate
from blis_fast.batch.evaluate import BatchResult, evaluate_many
from blis_fast.batch.scenarios import PreparedScenario, Scenario, load_scenarios_file, prepare

__all__ = ["BatchResult", "Budget", "BudgetExceeded", "Candidate", "PreparedScenario", "Scenario",
           "evaluate_many", "load_candidate", "load_scenarios_file", "prepare"]
