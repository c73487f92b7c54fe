from decode_server.server import main

main()
