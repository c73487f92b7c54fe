"""The workload flags, declared once: ``pdserve bench serve`` sends the workload they describe to a server,
``pdserve simulate`` and ``pdserve plan`` replay it on a simulated cluster. Names follow vLLM's ``bench serve``."""

from __future__ import annotations

import argparse

from pdserve.workload.datasets import DATASETS


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """What is sent (the dataset) and when (arrivals and the concurrency cap)."""
    g = p.add_argument_group("workload")
    g.add_argument("--dataset", "--dataset-name", dest="dataset", default="random", choices=DATASETS)
    g.add_argument("--dataset-path", default=None, help="file for jsonl, sharegpt and trace")
    g.add_argument("--num-prompts", type=int, default=None,
                   help="requests to send (default: 100 for random, the whole file otherwise)")
    g.add_argument("--input-len", "--random-input-len", dest="input_len", default="256",
                   help="random prompt tokens: N or MIN:MAX")
    g.add_argument("--output-len", "--random-output-len", dest="output_len", default=None,
                   help="max tokens per request: N or MIN:MAX (default 128; sharegpt and trace use their own lengths "
                        "unless given)")
    g.add_argument("--random-prefix-fraction", type=float, default=0.0,
                   help="share of each random prompt that is one prefix common to all requests (0 <= f < 1)")
    g.add_argument("--vocab-size", type=int, default=None,
                   help="token ids for random and trace prompts (default: what the router reports; 49152 when "
                        "simulating; needed with --base-url)")
    g.add_argument("--tokenizer", default=None, help="GGUF whose tokenizer counts ShareGPT reply tokens "
                                                     "(default: the default model if installed, else ~4 chars/token)")
    g.add_argument("--trace-block-tokens", type=int, default=512, help="tokens per trace hash id (Mooncake: 512)")
    g.add_argument("--trace-time-scale", type=float, default=1.0, help="replay the trace this many times faster")
    g.add_argument("--seed", type=int, default=0, help="makes the prompts, their order and the arrivals reproducible")
    g = p.add_argument_group("load")
    g.add_argument("--request-rate", type=float, default=float("inf"),
                   help="requests per second, Poisson or gamma arrivals (default inf: all at once)")
    g.add_argument("--burstiness", type=float, default=1.0, help="gamma shape: 1 = Poisson, < 1 burstier")
    g.add_argument("--max-concurrency", type=int, default=None, help="at most this many requests in flight")


def add_result_args(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """How a run's statistics are computed and saved; returns the group for a command's own result flags."""
    g = p.add_argument_group("results")
    g.add_argument("--goodput", nargs="+", default=None, metavar="NAME:MS",
                   help="SLOs for goodput, e.g. ttft:500 tpot:50 e2el:5000 (applied in both clocks)")
    g.add_argument("--metric-percentiles", default="90,95,99")
    g.add_argument("--save-result", nargs="?", const="", default=None, metavar="PATH",
                   help="write the JSON result (without PATH: a name with the command and the date)")
    return g
