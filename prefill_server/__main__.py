from pdserve.prefill_server.server import main

main()
