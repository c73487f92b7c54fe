from pdserve.common.blas_spin import short_blas_spin

short_blas_spin()  # before the server's imports load numpy (common/blas_spin.py)

from pdserve.decode_server.server import main  # noqa: E402

main()
