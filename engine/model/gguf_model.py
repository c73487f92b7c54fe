"""Loading a llama-architecture GGUF file: hyper-parameters, float32 weights and the quantized blocks.

Every tensor is dequantized once, at load time, with gguf-py's own dequantizers, into contiguous float32 arrays laid
out for ``x @ W`` (input dimension first). Q, K and V are fused into one matrix and gate/up into another, so that each
layer runs two large matmuls instead of five. Matrices stored as Q4_0, Q4_1 or Q8_0 are also kept in that form
(engine/model/quantized.py, fused the same way), for the steps whose time is the bytes they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import quants

from pdserve.engine.gguf_file import ModelConfig, ModelLoadError, read_metadata
from pdserve.engine.model.quantized import QuantizedLayer, QuantizedMatrix, QuantizedWeights, stacked

# Tensor types gguf-py can dequantize and that we accept: plain floats, the legacy block quants and the K-quants.
SUPPORTED_TENSOR_TYPES = {
    gguf.GGMLQuantizationType[name]
    for name in (
        "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
    )
}


@dataclass
class LayerWeights:
    wqkv: np.ndarray  # [hidden, (n_heads + 2 * n_kv_heads) * head_dim]; the attention norm's gain folded in
    wo: np.ndarray  # [n_heads * head_dim, hidden]
    w_gate_up: np.ndarray  # [hidden, 2 * ffn_hidden]; the FFN norm's gain folded in
    w_down: np.ndarray  # [ffn_hidden, hidden]


@dataclass
class ModelWeights:
    token_embedding: np.ndarray  # [vocab, hidden]
    layers: list[LayerWeights]
    output_norm: np.ndarray  # [hidden]
    output: np.ndarray  # [hidden, vocab]; the transposed embedding when tied
    quantized: QuantizedWeights | None = None  # the block-quantized matrices, where the file has them


@dataclass
class LoadedModel:
    path: Path
    config: ModelConfig
    weights: ModelWeights
    reader: gguf.GGUFReader


def _dequantized(tensor) -> np.ndarray:
    """A GGUF tensor as float32 in numpy's row-major shape (GGUF's dims reversed): [out, in] for matrices."""
    if tensor.tensor_type not in SUPPORTED_TENSOR_TYPES:
        raise ModelLoadError(f"tensor {tensor.name}: type {tensor.tensor_type.name} is not supported")
    data = quants.dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return np.ascontiguousarray(data.reshape(shape), dtype=np.float32)


def _quantized(tensors: dict, config: ModelConfig, tied: bool) -> QuantizedWeights | None:
    """The file's Q4_0 / Q4_1 / Q8_0 matrices as quantized matrices, fused as the float32 ones are; None if none."""
    def part(name: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType, int]:
        t = tensors[name]
        return t.data, t.tensor_type, int(t.shape[0])  # GGUF's first dimension is the input one

    def fused(*names: str) -> QuantizedMatrix | None:
        return stacked([part(n) for n in names])

    def gain(name: str) -> np.ndarray:
        return _dequantized(tensors[name])

    layers = []
    for i in range(config.n_layers):
        p = f"blk.{i}."
        layers.append(QuantizedLayer(
            qkv=fused(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"), wo=fused(p + "attn_output.weight"),
            gate_up=fused(p + "ffn_gate.weight", p + "ffn_up.weight"), down=fused(p + "ffn_down.weight"),
            attn_norm=gain(p + "attn_norm.weight"), ffn_norm=gain(p + "ffn_norm.weight")))
    weights = QuantizedWeights(layers, fused("token_embd.weight" if tied else "output.weight"))
    return None if weights.empty else weights


def load_gguf(path: str | Path, quantized: bool = True) -> LoadedModel:
    """Read and dequantize a llama-architecture GGUF file; with ``quantized``, also keep its quantized matrices."""
    path = Path(path)
    reader, config = read_metadata(path)
    tensors = {t.name: t for t in reader.tensors}
    for t in reader.tensors:  # fail before dequantizing anything
        if t.tensor_type not in SUPPORTED_TENSOR_TYPES:
            raise ModelLoadError(f"{path}: tensor {t.name} has type {t.tensor_type.name}, which is not supported")

    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise ModelLoadError(f"{path}: tensor {name} is missing")
        return _dequantized(tensors[name])

    def input_major(name: str) -> np.ndarray:
        return np.ascontiguousarray(get(name).T)  # [in, out] so activations multiply as x @ W

    layers = []
    for i in range(config.n_layers):
        p = f"blk.{i}."
        wqkv = np.concatenate(
            [input_major(p + "attn_q.weight"), input_major(p + "attn_k.weight"), input_major(p + "attn_v.weight")],
            axis=1,
        )
        w_gate_up = np.concatenate([input_major(p + "ffn_gate.weight"), input_major(p + "ffn_up.weight")], axis=1)
        layers.append(
            LayerWeights(
                wqkv=wqkv * get(p + "attn_norm.weight")[:, None],
                wo=input_major(p + "attn_output.weight"),
                w_gate_up=w_gate_up * get(p + "ffn_norm.weight")[:, None],
                w_down=input_major(p + "ffn_down.weight"),
            )
        )
    embedding = get("token_embd.weight")  # [vocab, hidden]
    tied = "output.weight" not in tensors
    output = np.ascontiguousarray(embedding.T) if tied else input_major("output.weight")
    weights = ModelWeights(
        token_embedding=embedding,
        layers=layers,
        output_norm=get("output_norm.weight"),
        output=output,
        quantized=_quantized(tensors, config, tied) if quantized else None,
    )
    return LoadedModel(path=path, config=config, weights=weights, reader=reader)
