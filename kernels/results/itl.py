"""The step coverage behind the ITL samples (blis_fast.results.metrics.ItlIndex): a
request's tokens inside a run of consecutive steps of its instance have those steps'
durations as samples, so the cluster's samples are each step's duration times the number
of runs covering it.  Steps are counted in *grouped* order -- instance 0's steps in log
order, then instance 1's, ... -- where a run is a contiguous range."""

import numpy as np

from ..jit import kernel


@kernel
def group_steps(step_instance, n_instances):
    """(position, starts): step s of the log is at ``position[s]`` in grouped order, and
    instance i's steps fill positions ``starts[i]:starts[i + 1]`` (a counting sort: stable,
    one pass to count and one to place).  Instances must lie in [0, n_instances)."""
    n = step_instance.shape[0]
    starts = np.zeros(n_instances + 1, np.int64)
    for s in range(n):
        starts[step_instance[s] + 1] += 1
    for i in range(n_instances):
        starts[i + 1] += starts[i]
    fill = starts[:n_instances].copy()
    position = np.empty(n, np.int64)
    for s in range(n):
        i = step_instance[s]
        position[s] = fill[i]
        fill[i] += 1
    return position, starts


@kernel
def run_cover(position, first, last):
    """Per step in grouped order, how many of the runs k cover it: the steps after
    ``first[k]`` through ``last[k]`` (step log indices of one instance's steps)."""
    n = position.shape[0]
    diff = np.zeros(n + 1, np.int64)
    for k in range(first.shape[0]):
        diff[position[first[k]] + 1] += 1
        diff[position[last[k]] + 1] -= 1
    cover = np.empty(n, np.int64)
    c = np.int64(0)
    for s in range(n):
        c += diff[s]
        cover[s] = c
    return cover
