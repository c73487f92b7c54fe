"""Compiled loops (numba) the forward pass calls; they import nothing else of the engine."""
