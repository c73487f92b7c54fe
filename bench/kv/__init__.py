"""KV benchmarks (``pdserve bench kv``): the kvstore's throughput and scale, and the hand-off inside the stack."""
