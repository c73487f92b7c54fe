from kvstore.server import main

main()
