from pdserve.decode_server.server import main

main()
