"""The ``pdserve`` command line. Before any command module imports numpy, BLAS's idle threads are told to sleep
almost at once (common/blas_spin.py says why)."""

from pdserve.common.blas_spin import short_blas_spin

short_blas_spin()
