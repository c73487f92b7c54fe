"""Command-line flags with matching environment variables: ``--kv-capacity-mb`` <-> ``PDSERVE_KV_CAPACITY_MB``.

An environment value goes through the same argparse checks as the flag itself (its type and its choices), so
``PDSERVE_PACE=bogus`` or ``PDSERVE_PORT=x`` stops the service with a usage error naming the variable; a flag given
on the command line wins over the environment.
"""

from __future__ import annotations

import argparse
import os
import sys

from pdserve.common.tls import add_identity_flags, add_tls_flags
from pdserve.engine.kv.blocks import DEFAULT_BLOCK_TOKENS
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE, KV_DTYPES

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def env_name(flag: str) -> str:
    return "PDSERVE_" + flag.lstrip("-").replace("-", "_").upper()


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (argparse's ArgumentDefaultsHelpFormatter skips options without a
    help text and prints "default: None")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or not action.option_strings or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS):
            return text
        if isinstance(action, (argparse._StoreConstAction, argparse._HelpAction, argparse._VersionAction)):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser whose long options also read their PDSERVE_* environment variable.

    ``add_argument(..., env=False)`` keeps an option off the environment (e.g. test-only switches). --help shows
    each option's default.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, env: bool = True, **kwargs):
        action = super().add_argument(*names, **kwargs)
        long = next((n for n in names if n.startswith("--")), None)
        if env and long and kwargs.get("action") not in ("help", "version"):
            action.env_var = env_name(long)
            action.help = f"{action.help or ''} [env {action.env_var}]".strip()
        return action

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
        from_env: list[str] = []
        for action in self._actions:
            var = getattr(action, "env_var", None)
            if var is None or var not in os.environ or given.intersection(action.option_strings):
                continue
            from_env += self._env_args(action, var, os.environ[var])
        return super().parse_known_args(from_env + args, namespace)

    def _env_args(self, action: argparse.Action, var: str, value: str) -> list[str]:
        """The command-line words an environment value stands for, after argparse's own checks of it."""
        flag = action.option_strings[-1]
        if action.nargs == 0:  # store_true and friends
            if value.lower() not in TRUE_WORDS + FALSE_WORDS:
                self.error(f"{var}={value!r}: expected one of {', '.join(TRUE_WORDS + FALSE_WORDS[:-1])}")
            return [flag] if value.lower() in TRUE_WORDS else []
        try:
            converted = action.type(value) if action.type else value
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            self.error(f"{var}={value!r}: invalid value for {flag} ({exc})")
        if action.choices is not None and converted not in action.choices:
            self.error(f"{var}={value!r}: must be one of {', '.join(map(str, action.choices))}")
        return [f"{flag}={value}"]


def service_parser(name: str, default_port: int, public: bool = False) -> FlagParser:
    """Flags every service has; ``public`` (the router, the HTTP edge) adds TLS for its public port."""
    parser = FlagParser(prog=f"python -m pdserve.{name}", description=f"pdserve {name}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus /metrics port (0: off)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address /metrics binds (HTTPS with client certificates under an identity)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    add_identity_flags(parser)
    if public:
        add_tls_flags(parser)
    return parser


def add_model_flags(parser: FlagParser) -> None:
    parser.add_argument("--model", default=None, help="GGUF path, or 'synthetic' (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--block-tokens", type=int, default=DEFAULT_BLOCK_TOKENS, help="tokens per KV block")
    parser.add_argument("--kv-dtype", default=DEFAULT_KV_DTYPE, choices=tuple(KV_DTYPES),
                        help="element type of the KV cache, in memory, in the kvstore and on the wire (attention "
                             "computes in float32); prefill, decode and the router must agree")


def split_targets(targets: str | None) -> list[str]:
    """'host:port,host:port' -> list, empty entries dropped."""
    return [t for t in (targets or "").split(",") if t]
