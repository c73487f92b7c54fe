"""Every benchmark of pdserve and the load tool, as ``pdserve bench COMMAND`` (the commands: cli.py).

- ``serve/``: the load tool in the manner of vLLM's ``bench serve``, pointed at any running stack (what to send and
  when, the statistics and the result block are workload/'s; this package adds the backends, the runner, sweeps and
  the side-by-side ``--compare``);
- ``kv/``: the kvstore's throughput and behaviour as it fills, and the KV hand-off inside the stack;
- ``faults/``: the fault matrix, hostile requests and the soak;
- ``runtime/``: the engine against this machine's floor and llama.cpp, the paced clock, the simulator's speed and
  the stop rules.
"""
