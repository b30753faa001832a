"""Policy candidates as data: ``compile_policies(PolicyConfig) -> CompiledPolicies`` (kinds +
a fixed-width parameter matrix).  The settings themselves live in ``blis_fast.config.policy``."""

from blis_fast.policy.compile import CompiledPolicies, compile_policies

__all__ = ["CompiledPolicies", "compile_policies"]
