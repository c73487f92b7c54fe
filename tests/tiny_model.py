"""A tiny llama GGUF written with gguf.GGUFWriter: random weights, byte-level vocabulary, SmolLM-style chat template.

Small enough that a forward pass takes microseconds, real enough that every code path of the runtime (GGUF parsing,
Q8_0 dequantization, tokenizer construction, chat template, GQA attention, tied embeddings) runs on it.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType, quants

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGE_WORDS = ["the", "and", "ing", "he", "in", "er", "an", "on", "at", "en", "is", "it"]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for every byte (what byte-level BPE vocabularies store)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    byte_chars = bytes_to_unicode()
    tokens = list(CONTROL_TOKENS) + [byte_chars[b] for b in range(256)]
    merges: list[str] = []
    for word in MERGE_WORDS:  # left-to-right merges building each word, plus a "Ġword" variant
        for prefix in ("", "Ġ"):
            current = prefix + word[0] if prefix else word[0]
            if prefix and current not in tokens:
                merges.append(f"Ġ {word[0]}")
                tokens.append(current)
            for ch in word[1:]:
                merged = current + ch
                if merged not in tokens:
                    merges.append(f"{current} {ch}")
                    tokens.append(merged)
                current = merged
    types = [3] * len(CONTROL_TOKENS) + [1] * (len(tokens) - len(CONTROL_TOKENS))
    return tokens, types, merges


JUDGE_ANSWER_TOKENS = ("Y", "y", "N", "n")  # first tokens of Yes/yes and No/no in this vocabulary


def write_tiny_model(path: Path, *, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                     ffn: int = 128, context: int = 512, seed: int = 0, weight_type: str = "F32",
                     even_judge: bool = False) -> Path:
    """``weight_type`` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) is used for every layer matrix.

    ``even_judge``: an untied output head whose rows for the yes and no answer tokens are zero, so their logits are
    always 0 and the completeness check (engine/text/completion.py) always reads P(yes) = 0.5 exactly: a threshold of 0.5
    passes every check, anything above it none."""
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab()
    head_dim = hidden // heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-test")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def matrix(out_dim: int, in_dim: int, scale: float = 1.0):
        return (rng.standard_normal((out_dim, in_dim)) * scale / np.sqrt(in_dim)).astype(np.float32)

    qtype = GGMLQuantizationType[weight_type]

    def add_matrix(name: str, value: np.ndarray) -> None:
        if qtype == GGMLQuantizationType.F32:
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, quants.quantize(value, qtype), raw_dtype=qtype)

    # the embedding is stored as Q8_0 (exercises dequantization); the rest as F32
    embedding = (rng.standard_normal((len(tokens), hidden))).astype(np.float32)
    writer.add_tensor("token_embd.weight", quants.quantize(embedding, GGMLQuantizationType.Q8_0),
                      raw_dtype=GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    if even_judge:
        head = embedding.copy()
        head[[tokens.index(t) for t in JUDGE_ANSWER_TOKENS]] = 0.0
        writer.add_tensor("output.weight", head)
    for i in range(layers):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        add_matrix(p + "attn_q.weight", matrix(hidden, hidden, 2.0))
        add_matrix(p + "attn_k.weight", matrix(kv_heads * head_dim, hidden, 2.0))
        add_matrix(p + "attn_v.weight", matrix(kv_heads * head_dim, hidden))
        add_matrix(p + "attn_output.weight", matrix(hidden, hidden))
        writer.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        add_matrix(p + "ffn_gate.weight", matrix(ffn, hidden))
        add_matrix(p + "ffn_up.weight", matrix(ffn, hidden))
        add_matrix(p + "ffn_down.weight", matrix(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":
    import sys

    print(write_tiny_model(Path(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf")))
