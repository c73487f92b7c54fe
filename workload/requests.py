"""The requests a workload's flags describe (``--dataset`` and friends, workload/args.py), for the model a server
serves: shared by ``pdserve bench serve`` and ``pdserve simulate``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pdserve.workload import datasets as ds

DEFAULT_OUTPUT_LEN = 128
DEFAULT_RANDOM_PROMPTS = 100


@dataclass
class ServedModel:
    name: str
    vocab_size: int = 0       # 0: unknown (HTTP endpoints do not say)
    context_length: int = 0


def token_counter(a: argparse.Namespace):
    """Counts reply tokens for ShareGPT: the GGUF tokenizer when one is at hand, else about 4 characters a token."""
    try:
        from pdserve.engine.runtime import model_metadata

        tokenizer = model_metadata(a.tokenizer or a.model)[0]
        return lambda text: len(tokenizer.encode(text, add_bos=False))
    except (FileNotFoundError, ValueError):
        if a.tokenizer:
            raise
        return lambda text: max(1, len(text) // 4)


def build_requests(a: argparse.Namespace, served: ServedModel, seed_offset: int = 0) -> list[ds.BenchRequest]:
    """The dataset the flags describe, sized to --num-prompts (reproducible with --seed)."""
    out_range = ds.parse_range(a.output_len, "--output-len") if a.output_len else None
    fixed_out = out_range[0] if out_range and out_range[0] == out_range[1] else None
    vocab = a.vocab_size or served.vocab_size
    if a.dataset in ("random", "trace") and not vocab:
        raise ValueError(f"--dataset {a.dataset} needs --vocab-size with --base-url (the endpoint does not say)")
    if a.dataset in ("jsonl", "sharegpt", "trace") and not a.dataset_path:
        raise ValueError(f"--dataset {a.dataset} needs --dataset-path")
    if a.num_prompts is not None and a.num_prompts < 1:
        raise ValueError(f"--num-prompts must be at least 1, got {a.num_prompts}")
    if a.dataset == "random":
        n = a.num_prompts or DEFAULT_RANDOM_PROMPTS
        return ds.random_requests(n, vocab, ds.parse_range(a.input_len, "--input-len"),
                                  out_range or (DEFAULT_OUTPUT_LEN, DEFAULT_OUTPUT_LEN), a.random_prefix_fraction,
                                  a.seed + seed_offset)
    if a.dataset == "trace":
        if a.trace_block_tokens < 1:
            raise ValueError(f"--trace-block-tokens must be at least 1, got {a.trace_block_tokens}")
        rows = ds.trace_requests(a.dataset_path, vocab, a.trace_block_tokens, a.trace_time_scale, fixed_out)
        return rows[:a.num_prompts] if a.num_prompts else rows
    if a.dataset == "sharegpt":
        rows = ds.sharegpt_requests(a.dataset_path, fixed_out, token_counter(a))
    elif a.dataset == "builtin":
        rows = ds.builtin_requests(fixed_out or DEFAULT_OUTPUT_LEN)
    else:
        rows = ds.prompt_file_requests(a.dataset_path, fixed_out or DEFAULT_OUTPUT_LEN)
    return ds.cycle_to(rows, a.num_prompts or len(rows), a.seed)
