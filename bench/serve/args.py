"""The flags of ``pdserve bench serve``: where to send the workload (workload/args.py) and what to do with the run;
names follow vLLM's ``bench serve`` where one exists."""

from __future__ import annotations

import argparse
import os

from pdserve.workload.args import add_result_args, add_workload_args


def add_bench_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target (one of)")
    g.add_argument("--target", default=None,
                   help="pdserve router HOST:PORT over gRPC [env PDSERVE_ROUTER, default 127.0.0.1:50050]")
    g.add_argument("--base-url", default=None,
                   help="an OpenAI-compatible server, with or without /v1, e.g. http://127.0.0.1:8000")
    g.add_argument("--endpoint", default=None, choices=("/v1/completions", "/v1/chat/completions"),
                   help="the route for --base-url (default: chat for chat datasets, completions otherwise)")
    g.add_argument("--served-model-name", default=None, help="model name for --base-url (default: the first listed)")
    g.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token for --base-url")
    g.add_argument("--request-timeout", type=float, default=None, help="seconds per request (default: none)")

    add_workload_args(p)
    g = p.add_argument_group("sampling and pacing of the load")
    g.add_argument("--ignore-eos", action="store_true", help="always generate --output-len tokens (always on for "
                                                             "random and trace prompts)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--duration", type=float, default=None, help="send for this many seconds instead of --num-prompts")
    g.add_argument("--warmup", "--num-warmups", dest="warmup", type=int, default=0,
                   help="requests sent first and not counted")
    g = add_result_args(p)
    g.add_argument("--disable-tqdm", action="store_true", help="no progress bar")

    g = p.add_argument_group("sweep and comparison")
    g.add_argument("--sweep", default=None, metavar="rate:R1,R2,.. | concurrency:C1,C2,..",
                   help="run the workload at each load and draw PNG plots")
    g.add_argument("--plot-dir", default="bench-plots", help="where --sweep writes its plots")
    g.add_argument("--compare", action="store_true",
                   help="start and run the in-process engine, the disaggregated stack and the colocated stack")
    g.add_argument("--model", default=None, help="GGUF for --compare (default: SmolLM2-135M-Instruct)")
    g.add_argument("--modes", default="in_process,disaggregated,colocated",
                   help="--compare: which of in_process, disaggregated, disaggregated_static (the workers on one core "
                        "each, never lending it: the split before core sharing), disaggregated_socket (the KV blocks "
                        "on the kvstore's socket instead of shared memory), disaggregated_insecure (the internal "
                        "plane run with --insecure-internal: what its security costs), colocated, llama_server (llama.cpp's "
                        "server on the same file and workload)")
    g.add_argument("--llama-server", default=None, metavar="PATH",
                   help="--compare: the llama-server binary of the llama_server mode (default: $PDSERVE_LLAMA_SERVER, "
                        "the PATH, then one built before with --build-llama-server)")
    g.add_argument("--build-llama-server", action="store_true",
                   help="--compare: build llama-server from the peer extra's llama.cpp source when none is found "
                        "(cmake and a C++ compiler; many minutes)")
    g.add_argument("--rounds", type=int, default=1,
                   help="--compare: run every mode this many times, the order rotating by round, and print the "
                        "medians of the throughputs and of the ratios to in-process")
    g.add_argument("--kv-shm", action=argparse.BooleanOptionalAction, default=True,
                   help="--compare: the disaggregated stacks move KV blocks through shared memory, as pdserve up does "
                        "(the default; the mode disaggregated_socket sends them over the socket in the same run)")
    g.add_argument("--prefill-flags", default="", metavar="FLAGS",
                   help="--compare: extra flags for the prefill worker, e.g. \"--max-num-batched-tokens 2048\"")
    g.add_argument("--decode-flags", default="", metavar="FLAGS",
                   help="--compare: extra flags for the decode worker (which also prefills in the colocated stack)")
