"""Per-subsystem random generators (docs/semantics.md §10: streams independent per subsystem).

seed(subsystem) = SeedSequence([master_seed, stable_hash(name)]): each subsystem's stream
depends only on the master seed and its own name, never on which other subsystems drew
first, so adding a consumer does not perturb the others.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stable_hash(name: str) -> int:
    """A 63-bit hash of ``name`` that is identical in every process (unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def subsystem_rng(master_seed: int, name: str) -> np.random.Generator:
    """The generator of subsystem ``name`` (e.g. ``"workload.arrivals"``) under ``master_seed``."""
    if master_seed < 0:
        raise ValueError("seed must be >= 0")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(master_seed), stable_hash(name)])))
