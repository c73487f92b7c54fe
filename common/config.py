"""Command-line flags with matching environment variables: ``--kv-capacity-mb`` <-> ``PDSERVE_KV_CAPACITY_MB``."""

from __future__ import annotations

import argparse
import os


def env_name(flag: str) -> str:
    return "PDSERVE_" + flag.lstrip("-").replace("-", "_").upper()


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser whose every long option defaults to its PDSERVE_* environment variable when set."""

    def add_argument(self, *names, **kwargs):
        long = next((n for n in names if n.startswith("--")), None)
        if long and "default" in kwargs and kwargs.get("action") not in ("store_true", "store_false"):
            env = os.environ.get(env_name(long))
            if env is not None:
                kwargs["default"] = kwargs.get("type", str)(env) if kwargs.get("type") else env
            kwargs["help"] = (kwargs.get("help", "") + f" [env {env_name(long)}]").strip()
        elif long and kwargs.get("action") == "store_true":
            env = os.environ.get(env_name(long))
            if env is not None:
                kwargs["default"] = env.lower() in ("1", "true", "yes", "on")
            kwargs["help"] = (kwargs.get("help", "") + f" [env {env_name(long)}]").strip()
        return super().add_argument(*names, **kwargs)


def service_parser(name: str, default_port: int) -> FlagParser:
    """Flags every service has."""
    parser = FlagParser(prog=f"python -m {name}", description=f"pdserve {name}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus /metrics port (0: off)")
    parser.add_argument("--log-level", default="INFO")
    return parser


def add_model_flags(parser: FlagParser) -> None:
    parser.add_argument("--model", default=None, help="GGUF path (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--block-tokens", type=int, default=16, help="tokens per KV block")


def split_targets(targets: str | None) -> list[str]:
    """'host:port,host:port' -> list, empty entries dropped."""
    return [t for t in (targets or "").split(",") if t]
