"""Fault benchmarks: the fault matrix (``chaos``), hostile requests and the soak."""
