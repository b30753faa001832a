"""What a run's expression and tree policies (blis_fast/config/expression.py) report: how
many of their values were not finite and were given the slot's worst value instead."""

from __future__ import annotations

from blis_fast_kernels import schema as S

# the slots a program can fill -> (its name in the results, the kind code of a program there; None:
# a slot that holds only programs, filled when its row has code)
PROGRAM_SLOT_KINDS = {S.PolicySlot.ADMISSION: ("admission", S.AdmissionKind.EXPRESSION),
                      S.PolicySlot.ROUTING: ("routing", S.RoutingKind.EXPRESSION),
                      S.PolicySlot.PRIORITY: ("priority", S.PriorityKind.EXPRESSION),
                      S.PolicySlot.SCHEDULER: ("scheduler", S.SchedulerKind.EXPRESSION),
                      S.PolicySlot.VICTIM: ("victim", S.VictimKind.EXPRESSION),
                      S.PolicySlot.AUTOSCALE: ("autoscale", S.AutoscaleKind.EXPRESSION),
                      S.PolicySlot.PD_DECIDER: ("pd", None),
                      S.PolicySlot.DISPATCH: ("dispatch", None),
                      S.PolicySlot.FLOW_INSTANCE: ("flow_instance", None),
                      S.PolicySlot.FLOW_SATURATED: ("flow_saturated", None)}


def program_faults(state) -> dict[str, int] | None:
    """``{slot: non-finite values}`` of every slot a program fills (routing: also a model's
    or the prefill legs' own routing), None when no slot does."""
    out = {}
    for slot, (name, code) in PROGRAM_SLOT_KINDS.items():
        if code is None:
            program = state.policy_param[slot, S.ProgramHeader.LENGTH] > 0
        else:
            program = int(state.policy_kind[slot]) == code
        if slot == S.PolicySlot.ROUTING:
            program = program or bool((state.routing_kind == code).any())
        if program:
            out[name] = int(state.prog_faults[slot])
    return out or None
