"""The 64-bit mixing function behind every hash in blis-fast (prefix keys, fresh block
keys, per-row seeds): splitmix64's finalizer ``fmix64`` and ``combine64(h, v) =
fmix64(h * MUL + v)``.  fmix64 is a bijection on uint64, and for a fixed h so is
v -> h * MUL + v, so two inputs that differ in one word always differ after a step.

All arithmetic is on uint64 and wraps around by design.
"""

import numpy as np

from ..jit import helper, kernel

# Constants are typed uint64 so numba never promotes the arithmetic to float64.
FMIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
FMIX_M2 = np.uint64(0x94D049BB133111EB)
MUL = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio odd multiplier (splitmix64's increment)
S30 = np.uint64(30)
S27 = np.uint64(27)
S31 = np.uint64(31)


@helper
def fmix64(x):
    """splitmix64 finalizer of the uint64 ``x`` (a bijection, good avalanche)."""
    x = (x ^ (x >> S30)) * FMIX_M1
    x = (x ^ (x >> S27)) * FMIX_M2
    return x ^ (x >> S31)


@helper
def combine64(h, v):
    """Mix the uint64 value ``v`` into the uint64 state ``h``; returns the new state."""
    return fmix64(h * MUL + v)


@kernel
def splitmix64_sequence(n, seed):
    """int64[n]: the splitmix64 outputs fmix64(seed + (k + 1) * MUL), k = 0..n-1 (distinct
    pseudo-random 64-bit values; uint64 bits viewed as int64)."""
    out = np.empty(n, np.uint64)
    s = np.uint64(seed)
    for k in range(n):
        out[k] = fmix64(s + np.uint64(k + 1) * MUL)
    return out.view(np.int64)
