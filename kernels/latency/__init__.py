"""Step-time models (docs/latency-models.md): blackbox coefficients and the roofline."""
