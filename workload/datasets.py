"""What a benchmark sends: a list of :class:`BenchRequest`, from one of five sources.

- ``random``: random token ids, input and output lengths drawn from ranges, an optional shared prefix (a fraction of
  each prompt common to every request) so prefix caching can be studied;
- ``builtin``: the chat prompts shipped with pdserve (English and Chinese, ``data/prompts.jsonl``);
- ``jsonl``: one JSON object a line, ``{"prompt": "..."}`` or ``{"messages": [...]}``, optionally ``"output_len"``;
- ``sharegpt``: a ShareGPT JSON file (the first human turn is the prompt, the reply's length the output length);
- ``trace``: a timestamped JSONL trace in the format of the public Mooncake traces (``timestamp`` in ms,
  ``input_length``, ``output_length``, ``hash_ids``: one id per block of prompt tokens, equal ids = equal blocks),
  replayed at its own timing or scaled.

Every error names the file, the line and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

DATASETS = ("random", "builtin", "jsonl", "sharegpt", "trace")
FIRST_RANDOM_ID = 100  # random prompts draw ids from [100, vocab): clear of every control token


@dataclass
class BenchRequest:
    """One request as the backends send it: exactly one of prompt / messages / token_ids."""
    output_len: int
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    token_ids: list[int] | None = None
    arrival_s: float | None = None  # trace replay: seconds after the first request
    hash_ids: list[int] = field(default_factory=list)

    @property
    def known_prompt_len(self) -> int:
        """Prompt tokens when the client knows them (token ids); else 0 and the server's usage says."""
        return len(self.token_ids) if self.token_ids is not None else 0


def parse_range(text: str | int, name: str) -> tuple[int, int]:
    """``"256"`` -> (256, 256); ``"128:512"`` -> (128, 512)."""
    try:
        parts = [int(x) for x in str(text).split(":")]
    except ValueError:
        raise ValueError(f"{name}: expected N or MIN:MAX, got {text!r}") from None
    low, high = (parts[0], parts[0]) if len(parts) == 1 else parts if len(parts) == 2 else (0, -1)
    if len(parts) > 2 or low < 1 or high < low:
        raise ValueError(f"{name}: expected N or MIN:MAX with 1 <= MIN <= MAX, got {text!r}")
    return low, high


def random_requests(n: int, vocab: int, input_len: tuple[int, int], output_len: tuple[int, int],
                    prefix_fraction: float = 0.0, seed: int = 0) -> list[BenchRequest]:
    """Random prompts; the first ``prefix_fraction`` of each is one prefix shared by all of them."""
    if not 0.0 <= prefix_fraction < 1.0:
        raise ValueError(f"--random-prefix-fraction must be in [0, 1), got {prefix_fraction}")
    if vocab <= FIRST_RANDOM_ID:
        raise ValueError(f"vocabulary of {vocab} tokens is too small for random prompts")
    rng = np.random.default_rng(seed)
    shared = rng.integers(FIRST_RANDOM_ID, vocab, input_len[1]).tolist()
    out = []
    for _ in range(n):
        length = int(rng.integers(input_len[0], input_len[1] + 1))
        k = int(length * prefix_fraction)
        ids = shared[:k] + rng.integers(FIRST_RANDOM_ID, vocab, length - k).tolist()
        out.append(BenchRequest(output_len=int(rng.integers(output_len[0], output_len[1] + 1)), token_ids=ids))
    return out


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    rows = []
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rows.append((lineno, _parse_json(line, f"{path}:{lineno}", dict, "expected a JSON object")))
    if not rows:
        raise ValueError(f"{path}: no requests in the file")
    return rows


def _parse_json(text: str, where: str, kind: type, expected: str):
    """``text`` as JSON of type ``kind``; ValueError naming ``where`` (a file, or a file and line) otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(value, kind):
        raise ValueError(f"{where}: {expected}")
    return value


def _open(path: Path):
    if not Path(path).is_file():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    return open(path, encoding="utf-8")


def _prompt_request(row: dict, where: str, output_len: int) -> BenchRequest:
    n = row.get("output_len", row.get("max_tokens", output_len))
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}: 'output_len' must be a positive integer, got {n!r}")
    if isinstance(row.get("messages"), list):
        messages = row["messages"]
        if not messages or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                   and isinstance(m.get("content"), str) for m in messages):
            raise ValueError(f"{where}: 'messages' must be a non-empty list of {{role, content}} strings")
        return BenchRequest(output_len=n, messages=[{"role": m["role"], "content": m["content"]} for m in messages])
    if isinstance(row.get("prompt"), str) and row["prompt"]:
        return BenchRequest(output_len=n, prompt=row["prompt"])
    raise ValueError(f"{where}: needs a non-empty 'prompt' string or a 'messages' list")


def prompt_file_requests(path: str | Path, output_len: int) -> list[BenchRequest]:
    path = Path(path)
    return [_prompt_request(row, f"{path}:{lineno}", output_len) for lineno, row in _read_jsonl(path)]


def builtin_requests(output_len: int) -> list[BenchRequest]:
    source = resources.files("pdserve.workload") / "data" / "prompts.jsonl"
    with resources.as_file(source) as path:
        return prompt_file_requests(path, output_len)


def sharegpt_requests(path: str | Path, output_len: int | None, count_tokens) -> list[BenchRequest]:
    """First human turn -> prompt; the following reply's token count -> output length (unless fixed)."""
    path = Path(path)
    with _open(path) as fh:
        data = _parse_json(fh.read(), str(path), list, "a ShareGPT file is a JSON list of conversations")
    out = []
    for i, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise ValueError(f"{path}: entry {i} has no 'conversations' list")
        if len(turns) < 2 or not all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in turns[:2]):
            continue  # vLLM skips conversations without a prompt and a reply, and so do we
        prompt, reply = turns[0]["value"], turns[1]["value"]
        if not prompt:
            continue
        n = output_len or max(1, count_tokens(reply))
        out.append(BenchRequest(output_len=n, messages=[{"role": "user", "content": prompt}]))
    if not out:
        raise ValueError(f"{path}: no conversation with a prompt and a reply")
    return out


def block_tokens_for(hash_id: int, block_tokens: int, vocab: int) -> list[int]:
    """The tokens standing for one trace block: the same hash id always gives the same tokens."""
    return np.random.default_rng([0x7ace, hash_id]).integers(FIRST_RANDOM_ID, vocab, block_tokens).tolist()


def trace_requests(path: str | Path, vocab: int, block_tokens: int = 512, time_scale: float = 1.0,
                   output_len: int | None = None) -> list[BenchRequest]:
    """A Mooncake-format trace; arrival times are divided by ``time_scale`` (2 = twice as fast)."""
    if time_scale <= 0:
        raise ValueError(f"--trace-time-scale must be positive, got {time_scale}")
    if vocab <= FIRST_RANDOM_ID:
        raise ValueError(f"vocabulary of {vocab} tokens is too small for trace prompts")
    path = Path(path)
    out = []
    first = None
    for lineno, row in _read_jsonl(path):
        where = f"{path}:{lineno}"
        for key in ("timestamp", "input_length", "output_length"):
            if not isinstance(row.get(key), (int, float)) or row[key] < 0:
                raise ValueError(f"{where}: '{key}' must be a non-negative number, got {row.get(key)!r}")
        hash_ids = row.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) for h in hash_ids):
            raise ValueError(f"{where}: 'hash_ids' must be a list of integers")
        n_in = int(row["input_length"])
        if n_in < 1:
            raise ValueError(f"{where}: 'input_length' must be at least 1")
        ids: list[int] = []
        for h in hash_ids:
            ids += block_tokens_for(h, block_tokens, vocab)
        if len(ids) < n_in:  # tokens past the listed blocks: request-private
            rng = np.random.default_rng([0x7ace, lineno, 1])
            ids += rng.integers(FIRST_RANDOM_ID, vocab, n_in - len(ids)).tolist()
        first = row["timestamp"] if first is None else first
        out.append(BenchRequest(output_len=output_len or max(1, int(row["output_length"])), token_ids=ids[:n_in],
                                arrival_s=(row["timestamp"] - first) / 1000.0 / time_scale, hash_ids=hash_ids))
    return out


def cycle_to(requests: list[BenchRequest], n: int, seed: int) -> list[BenchRequest]:
    """``n`` requests: the dataset shuffled with ``seed``, repeated as often as needed (trace order is kept)."""
    if any(r.arrival_s is not None for r in requests):
        return requests[:n]
    order = np.random.default_rng(seed).permutation(len(requests))
    return [requests[order[i % len(requests)]] for i in range(n)]
