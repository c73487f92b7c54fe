"""Tokenizer, chat template and streaming detokenizer, all built from the GGUF file's own metadata.

The BPE itself is the ``tokenizers`` library: vocabulary and merges from ``tokenizer.ggml.*``, control tokens
(token_type 3) registered as special tokens so ``<|im_start|>`` is one id, and the pre-tokenizer chosen by
``tokenizer.ggml.pre``.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from pdserve.engine.gguf_file import ModelLoadError, field_value

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# The GPT-2 split pattern (byte-level BPE models that name no other).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)

# Names of end-of-turn tokens used by common chat templates.
END_OF_TURN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")


def _pre_tokenizer(name: str | None) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if name in ("smollm", "starcoder", "refact", "codeshell"):
        # digits one by one, then the GPT-2 split, then byte-level mapping
        return pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated"),
            byte_level,
        ])
    if name in ("llama3", "llama-bpe", "smaug-bpe"):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"), byte_level])
    if name in (None, "default", "gpt-2", "gpt2"):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated"), byte_level])
    raise ModelLoadError(f"tokenizer.ggml.pre {name!r} is not supported")


@dataclass
class ChatTemplate:
    source: str

    def __post_init__(self) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(message: str):
            raise ValueError(message)

        env.globals["raise_exception"] = raise_exception
        self._template = env.from_string(self.source)

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, **extra) -> str:
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **extra)


def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte (GPT-2's scheme): printable Latin-1 bytes stand for
    themselves, the other bytes for the code points from 256 up, in byte order. Returns character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    mapping = {chr(b): b for b in printable}
    mapping.update({chr(256 + i): b for i, b in enumerate(others)})
    return mapping


_UNICODE_TO_BYTE = _byte_alphabet()


class GGUFTokenizer:
    """Byte-level BPE tokenizer of a GGUF model."""

    def __init__(self, reader: gguf.GGUFReader) -> None:
        kind = field_value(reader, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise ModelLoadError(f"tokenizer.ggml.model {kind!r} is not supported (only byte-level BPE, 'gpt2')")
        tokens: list[str] = field_value(reader, "tokenizer.ggml.tokens")
        merges: list[str] = field_value(reader, "tokenizer.ggml.merges") or []
        types: list[int] = field_value(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
        vocab = {tok: i for i, tok in enumerate(tokens)}
        bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges], fuse_unk=False)
        self._tok = Tokenizer(bpe)
        self._tok.pre_tokenizer = _pre_tokenizer(field_value(reader, "tokenizer.ggml.pre"))
        self._tok.decoder = decoders.ByteLevel()
        self._tok.add_special_tokens(
            [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == TOKEN_TYPE_CONTROL]
        )
        self._tok.add_tokens(
            [AddedToken(t, normalized=False) for t, ty in zip(tokens, types) if ty == TOKEN_TYPE_USER_DEFINED]
        )
        self.tokens = tokens
        self.vocab = vocab
        self.control_ids = {i for i, ty in enumerate(types) if ty == TOKEN_TYPE_CONTROL}
        self.bos_id: int | None = field_value(reader, "tokenizer.ggml.bos_token_id")
        self.eos_id: int | None = field_value(reader, "tokenizer.ggml.eos_token_id")
        self.add_bos: bool = bool(field_value(reader, "tokenizer.ggml.add_bos_token", False))
        template = field_value(reader, "tokenizer.chat_template")
        self.chat_template = ChatTemplate(template) if template else None
        self.eos_ids = self._end_ids(template or "")

    def _end_ids(self, template: str) -> frozenset[int]:
        """The EOS id plus the chat template's end-of-turn token (a control token the template writes)."""
        ids = {self.eos_id} if self.eos_id is not None else set()
        for name in END_OF_TURN_NAMES:
            tid = self.vocab.get(name)
            if tid is not None and tid in self.control_ids and name in template:
                ids.add(tid)
        return frozenset(ids)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for: its vocabulary entry through the byte-level alphabet (control and added
        tokens: their own UTF-8 spelling)."""
        token = self.tokens[token_id]
        if token_id in self.control_ids or any(c not in _UNICODE_TO_BYTE for c in token):
            return token.encode()
        return bytes(_UNICODE_TO_BYTE[c] for c in token)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special)

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if self.chat_template is None:
            raise ValueError("messages: this model has no chat template; send a plain prompt")
        return self.chat_template.render(
            messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.tokens[self.bos_id] if self.bos_id is not None else "",
            eos_token=self.tokens[self.eos_id] if self.eos_id is not None else "",
        )

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Chat prompt ids; BOS is not added since templates write it themselves when they want it."""
        return self.encode(self.render_chat(messages), add_bos=False)


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas without ever emitting half a UTF-8 character.

    ``tokenizers``' own DecodeStream does the work; it is primed with the last prompt tokens so the first output
    token decodes as it would in context (e.g. a leading space).
    """

    PROMPT_CONTEXT = 6

    def __init__(self, tokenizer: GGUFTokenizer, prompt_ids: list[int] | None = None,
                 skip_special: bool = True) -> None:
        self._tokenizer = tokenizer._tok
        context = list(prompt_ids or [])[-self.PROMPT_CONTEXT:]
        self._stream = decoders.DecodeStream(context or None, skip_special)

    def push(self, token_id: int) -> str:
        return self._stream.step(self._tokenizer, token_id) or ""
