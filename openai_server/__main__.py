from openai_server.server import main

main()
