"""The numba target: Kernel IR rendered as a Python module of numba kernels."""
