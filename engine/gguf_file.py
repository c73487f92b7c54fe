"""A GGUF file's header: the model's hyper-parameters and metadata, read without touching tensor data.

The tokenizer, the KV cache's block sizes and the router need this much of a model file; loading the weights is
engine/model/gguf_model.py's job.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import gguf

SUPPORTED_ARCHITECTURES = ("llama",)


class ModelLoadError(ValueError):
    """The file is not a model this runtime can run; the message names what is wrong."""


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a llama-style decoder, as read from GGUF metadata."""

    name: str
    n_layers: int
    hidden: int
    ffn_hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rope_freq_base: float
    rms_eps: float
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ModelLoadError(f"head_count {self.n_heads} is not a multiple of head_count_kv {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ModelLoadError(f"head dimension {self.head_dim} must be even for RoPE")

    @property
    def group_size(self) -> int:
        """Query heads sharing one KV head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def kv_bytes_per_token(self) -> int:
        return self.n_layers * 2 * self.n_kv_heads * self.head_dim * 4


def field_value(reader: gguf.GGUFReader, key: str, default=None):
    """A metadata value as a plain Python object, or ``default`` when absent."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def file_fingerprint(path: Path) -> str:
    """sha256 of the file: equal fingerprints mean byte-identical weights, so KV blocks can be shared."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()[:32]


def read_config(reader: gguf.GGUFReader, path: Path, fingerprint: str) -> ModelConfig:
    arch = field_value(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            f"{path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )

    def need(key: str):
        value = field_value(reader, f"{arch}.{key}")
        if value is None:
            raise ModelLoadError(f"{path}: metadata key {arch}.{key} is missing")
        return value

    hidden = int(need("embedding_length"))
    n_heads = int(need("attention.head_count"))
    n_kv_heads = int(field_value(reader, f"{arch}.attention.head_count_kv", n_heads))
    vocab = field_value(reader, f"{arch}.vocab_size")
    if vocab is None:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise ModelLoadError(f"{path}: neither {arch}.vocab_size nor tokenizer.ggml.tokens is present")
        vocab = len(tokens.data)
    return ModelConfig(
        name=str(field_value(reader, "general.name", path.stem)),
        n_layers=int(need("block_count")),
        hidden=hidden,
        ffn_hidden=int(need("feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=hidden // n_heads,
        vocab_size=int(vocab),
        context_length=int(need("context_length")),
        rope_freq_base=float(field_value(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(field_value(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        fingerprint=fingerprint,
    )


def read_metadata(path: str | Path, fingerprint: bool = True) -> tuple[gguf.GGUFReader, ModelConfig]:
    """The file's reader and hyper-parameters, without touching tensor data (what the router needs).
    ``fingerprint``: hash the whole file (what tells byte-identical weights apart; a check that only asks whether the
    file is a model it can run skips it)."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model file {path} does not exist")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # gguf raises ValueError / struct errors for non-GGUF files
        raise ModelLoadError(f"{path}: not a readable GGUF file ({exc})") from exc
    return reader, read_config(reader, path, file_fingerprint(path) if fingerprint else "")
