"""Numba kernels of blis-fast: state dtypes, event heap, KV cache, engine loop."""
