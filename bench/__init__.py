"""``pdserve bench``: a load tool in the manner of vLLM's ``bench serve``, pointed at any running stack.

One module per job: ``datasets`` (what to send), ``arrivals`` (when), ``backends`` (how: the router over gRPC, an
OpenAI-compatible HTTP endpoint, or the in-process engine), ``record`` (one request's outcome), ``runner`` (sending
with a concurrency cap and a progress bar), ``metrics`` (statistics in the wall and the modeled clock), ``report``
(the result block and the JSON file), ``sweep`` (several loads, PNG plots), ``compare`` (one workload against three
ways of serving), ``args`` (the flags) and ``command`` (from the flags to a run).
"""
