from prefill_server.server import main

main()
