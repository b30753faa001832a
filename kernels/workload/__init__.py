"""Kernels of workload preparation: prefix-block keys, and the byte-level trace CSV scanner."""
