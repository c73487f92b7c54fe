"""The flags of ``pdserve bench`` (registered by client/cli.py); names follow vLLM's ``bench serve`` where one exists."""

from __future__ import annotations

import argparse
import os

from pdserve.client.bench.datasets import DATASETS


def add_bench_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target (one of)")
    g.add_argument("--target", default=None,
                   help="pdserve router HOST:PORT over gRPC [env PDSERVE_ROUTER, default 127.0.0.1:50050]")
    g.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--served-model-name", default=None, help="model name for --base-url (default: the first listed)")
    g.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token for --base-url")
    g.add_argument("--request-timeout", type=float, default=None, help="seconds per request (default: none)")

    g = p.add_argument_group("workload")
    g.add_argument("--dataset", "--dataset-name", dest="dataset", default="random", choices=DATASETS)
    g.add_argument("--dataset-path", default=None, help="file for jsonl, sharegpt and trace")
    g.add_argument("--num-prompts", type=int, default=None,
                   help="requests to send (default: 100 for random, the whole file otherwise)")
    g.add_argument("--input-len", default="256", help="random prompt tokens: N or MIN:MAX")
    g.add_argument("--output-len", default=None,
                   help="max tokens per request: N or MIN:MAX (default 128; sharegpt and trace use their own lengths "
                        "unless given)")
    g.add_argument("--random-prefix-fraction", type=float, default=0.0,
                   help="share of each random prompt that is one prefix common to all requests (0 <= f < 1)")
    g.add_argument("--vocab-size", type=int, default=None,
                   help="token ids for random and trace prompts (default: what the router reports; needed with "
                        "--base-url)")
    g.add_argument("--tokenizer", default=None, help="GGUF whose tokenizer counts ShareGPT reply tokens "
                                                     "(default: the default model if installed, else ~4 chars/token)")
    g.add_argument("--trace-block-tokens", type=int, default=512, help="tokens per trace hash id (Mooncake: 512)")
    g.add_argument("--trace-time-scale", type=float, default=1.0, help="replay the trace this many times faster")
    g.add_argument("--ignore-eos", action="store_true", help="always generate --output-len tokens (always on for "
                                                             "random and trace prompts)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=0, help="makes the prompts, their order and the arrivals reproducible")

    g = p.add_argument_group("load")
    g.add_argument("--request-rate", type=float, default=float("inf"),
                   help="requests per second, Poisson or gamma arrivals (default inf: all at once)")
    g.add_argument("--burstiness", type=float, default=1.0, help="gamma shape: 1 = Poisson, < 1 burstier")
    g.add_argument("--max-concurrency", type=int, default=None, help="at most this many requests in flight")
    g.add_argument("--duration", type=float, default=None, help="send for this many seconds instead of --num-prompts")
    g.add_argument("--warmup", "--num-warmups", dest="warmup", type=int, default=0,
                   help="requests sent first and not counted")

    g = p.add_argument_group("results")
    g.add_argument("--goodput", nargs="+", default=None, metavar="NAME:MS",
                   help="SLOs for goodput, e.g. ttft:500 tpot:50 e2el:5000 (applied in both clocks)")
    g.add_argument("--metric-percentiles", default="90,95,99")
    g.add_argument("--save-result", nargs="?", const="", default=None, metavar="PATH",
                   help="write the JSON result (default name: bench-<backend>-<date>.json)")
    g.add_argument("--disable-tqdm", action="store_true", help="no progress bar")

    g = p.add_argument_group("sweep and comparison")
    g.add_argument("--sweep", default=None, metavar="rate:R1,R2,.. | concurrency:C1,C2,..",
                   help="run the workload at each load and draw PNG plots")
    g.add_argument("--plot-dir", default="bench-plots", help="where --sweep writes its plots")
    g.add_argument("--compare", action="store_true",
                   help="start and run the in-process engine, the disaggregated stack and the colocated stack")
    g.add_argument("--model", default=None, help="GGUF for --compare (default: SmolLM2-135M-Instruct)")
    g.add_argument("--modes", default="in_process,disaggregated,colocated", help="--compare: which of the three")
    g.add_argument("--kv-shm", action="store_true",
                   help="--compare: the disaggregated stack moves KV blocks through /dev/shm (kvstore and workers)")
    g.add_argument("--prefill-flags", default="", metavar="FLAGS",
                   help="--compare: extra flags for the prefill worker, e.g. \"--max-num-batched-tokens 2048\"")
    g.add_argument("--decode-flags", default="", metavar="FLAGS",
                   help="--compare: extra flags for the decode worker (which also prefills in the colocated stack)")
