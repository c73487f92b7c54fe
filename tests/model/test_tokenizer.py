"""Tokenizer from GGUF metadata: round trips, special tokens, digits, and streamed detokenization."""

import gguf
import pytest

from pdserve.engine.text.tokenizer import GGUFTokenizer, IncrementalDetokenizer

TEXTS = [
    "The capital of France is Paris.",
    "巴黎是法国的首都",
    "emoji: 😀👍🏽 and 🇫🇷!",
    "digits 1234567890 and 3.14159",
    "  leading spaces\n\ttabs and newlines\n\n",
]


@pytest.fixture(scope="module")
def real_tok(real_model_path):
    return GGUFTokenizer(gguf.GGUFReader(real_model_path))


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_and_streaming(real_tok, text):
    ids = real_tok.encode(text)
    assert real_tok.decode(ids) == text
    detok = IncrementalDetokenizer(real_tok, [1, 2, 3])
    deltas = [detok.push(t) for t in ids]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)  # never half a character


def test_chinese_characters_come_out_whole_once(real_tok):
    text = "巴黎是法国的首都"
    ids = real_tok.encode(text)
    assert len(ids) > len(text)  # some characters span several byte-level tokens
    detok = IncrementalDetokenizer(real_tok)
    deltas = [detok.push(t) for t in ids]
    assert "".join(deltas) == text
    assert [d for d in deltas if d] == list(text)  # each character once, whole, in its own delta
    assert deltas.count("") == len(ids) - len(text)  # the tokens that end mid-character emit nothing


def test_digits_split_one_by_one(real_tok):
    ids = real_tok.encode("12345")
    assert len(ids) == 5
    assert [real_tok.decode([i]) for i in ids] == list("12345")


def test_control_tokens_are_single_ids(real_tok):
    ids = real_tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == real_tok.vocab["<|im_start|>"] and ids[-1] == real_tok.vocab["<|im_end|>"]
    assert real_tok.vocab["<|im_end|>"] in real_tok.eos_ids


def test_chat_template(real_tok):
    text = real_tok.render_chat([{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")


def test_tiny_model_tokenizer(tiny_runtime):
    tok = tiny_runtime.tokenizer
    ids = tok.encode("the 42 things")
    assert tok.decode(ids) == "the 42 things"
    assert tok.encode_chat([{"role": "user", "content": "x"}])[0] == tok.vocab["<|im_start|>"]
