"""Control policies as data (docs/policies.md): each is a kind code (``policy_kind[slot]``)
and a row of parameters (``policy_param[slot]``), compiled by ``blis_fast.policy``.  The
kernels branch on the kind and read the row, so a new candidate costs no compilation and,
being numbers, cannot escape the simulation.  Ties go to the lowest instance index
(routing) or to (arrival, request id) (ordering)."""
