"""Checks ``pdserve up`` makes before any service starts, so a mistake costs a second, not a model load, and the
message names the flag to change (``pdserve: error: --port 50050: ...``)."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from pdserve.engine.gguf_file import ModelLoadError, read_metadata
from pdserve.engine.model.default_model import resolve_model_path
from pdserve.engine.model.synthetic import SYNTHETIC_NAME
from pdserve.launcher.ports import metrics_port_for
from pdserve.perfmodel.deployment import parse_deployment


def check_model(model: str | None) -> None:
    """--model is a GGUF file of an architecture pdserve runs (metadata only: no weights read)."""
    if str(model) == SYNTHETIC_NAME:
        return
    path = resolve_model_path(model)
    where = f"--model {model}" if model else f"the default model ({path})"
    if not Path(path).is_file():
        hint = ("; a Hugging Face id is not fetched: download the .gguf file and pass its path"
                if model and "/" in str(model) and not str(model).endswith(".gguf") else "")
        raise ValueError(f"{where}: no such file{hint}")
    try:
        read_metadata(path, fingerprint=False)
    except ModelLoadError as exc:
        raise ValueError(f"{where}: {exc}") from None


def check_deployment_flag(text: str) -> None:
    """--deployment names a known model profile and GPU and a parallel layout that divides (the workers check the
    rest as they start); the error lists the known names."""
    try:
        d = parse_deployment(text, field_name="--deployment")
        d.profile(), d.gpu(), d.parallel()
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith("--deployment") else f"--deployment: {message}") from None


def _taken(host: str, port: int) -> str | None:
    """Why ``port`` cannot be bound on ``host`` (None: free)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
    return None


def fixed_ports(spec, router_flag: str = "--port") -> list[tuple[str, int]]:
    """(flag, port) for every fixed port the stack will bind."""
    out = []
    if spec.router_port:
        out.append((router_flag, spec.router_port))
    if spec.http_port:
        out.append(("--http-port", spec.http_port))
    if spec.metrics and spec.metrics_base_port:
        counts = {"router": 1, "openai_server": 1 if spec.http_port is not None else 0,
                  "kvstore": 0 if spec.colocated else spec.n_kvstore,
                  "prefill_server": 0 if spec.colocated else spec.n_prefill, "decode_server": spec.n_decode}
        for module, n in counts.items():
            out += [("--metrics-base-port", metrics_port_for(spec.metrics_base_port, module, i)) for i in range(n)]
    return out


def check_ports(spec) -> None:
    """Every fixed port is free on the stack's host, else an error naming the flag that chose it."""
    seen: dict[int, str] = {}
    for flag, port in fixed_ports(spec):
        if port in seen:
            raise ValueError(f"{flag}: port {port} is also chosen by {seen[port]}")
        seen[port] = flag
        reason = _taken(spec.host, port)
        if reason:
            advice = ("choose another base (the metrics ports are base + offsets)" if flag == "--metrics-base-port"
                      else "choose another port, or 0 for any free one")
            raise ValueError(f"{flag}: port {port} on {spec.host} is {reason}; {advice}")
