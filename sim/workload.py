"""The simulator's workload: the same datasets, traces and arrival processes as ``pdserve bench``
(client/bench/datasets.py, arrivals.py), turned into prompt token ids and output lengths.

Token-id datasets (random, trace) are used as they are. Text prompts (builtin, jsonl, ShareGPT) are tokenized
with the default model's tokenizer and chat template, as the router would; without it, a stand-in of one token per
four characters (equal text still gives equal ids, so prefixes are still shared).
"""

from __future__ import annotations

import argparse
import itertools
import zlib

from pdserve.sim.cluster import SimRequest
from pdserve.workload import datasets as ds
from pdserve.workload.arrivals import schedule
from pdserve.workload.requests import ServedModel, build_requests

DEFAULT_VOCAB = 49152  # SmolLM2's, what `pdserve bench` gets from a pdserve router


def _tokenizer(name: str | None):
    try:
        from pdserve.engine.runtime import model_metadata

        return model_metadata(name)[0]
    except (FileNotFoundError, ValueError, ImportError):
        if name:
            raise
        return None


def _stand_in_ids(text: str) -> list[int]:
    return [ds.FIRST_RANDOM_ID + zlib.crc32(text[i:i + 4].encode()) % 40_000 for i in range(0, max(1, len(text)), 4)]


def prompt_ids(request: ds.BenchRequest, tokenizer) -> list[int]:
    if request.token_ids is not None:
        return request.token_ids
    if tokenizer is None:
        text = request.prompt if request.prompt is not None else "\n".join(m["content"] for m in request.messages)
        return _stand_in_ids(text)
    if request.messages is not None:
        return tokenizer.encode_chat(request.messages)
    return tokenizer.encode(request.prompt)


def build_workload(a: argparse.Namespace) -> tuple[list[SimRequest], list[float]]:
    """Requests and their arrival offsets (seconds) from the workload flags shared with ``pdserve bench``."""
    served = ServedModel("simulated", a.vocab_size or DEFAULT_VOCAB)
    bench_requests = build_requests(a, served)
    tokenizer = None if a.dataset in ("random", "trace") else _tokenizer(a.tokenizer)
    requests = [SimRequest(prompt_ids(r, tokenizer), r.output_len) for r in bench_requests]
    offsets = list(itertools.islice(schedule(bench_requests, a.request_rate, a.burstiness, a.seed), len(requests)))
    return requests, offsets
