from pdserve.kvstore.main import main

main()
