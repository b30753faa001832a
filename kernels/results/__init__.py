"""Kernels of the judge (blis_fast.results): passes over a finished run's tables that
would otherwise be many numpy calls holding the GIL -- the request fields read column-wise,
the ITL samples' step coverage."""
