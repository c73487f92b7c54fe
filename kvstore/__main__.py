from pdserve.kvstore.server import main

main()
