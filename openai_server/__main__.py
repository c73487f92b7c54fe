from pdserve.openai_server.server import main

main()
