"""Token spellings for log-probabilities: the workers send token ids, clients want each token's text and bytes."""

from __future__ import annotations

from collections.abc import Iterable

from pdserve.engine.text.tokenizer import GGUFTokenizer
from pdserve.v1 import common_pb2


def token_text(raw: bytes) -> str:
    """A token's text; one that is not whole UTF-8 (part of a character) is spelled ``bytes:\\xe5\\x85`` (vLLM's
    convention), so that no information is lost and nothing is mistaken for a replacement character."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


class TokenPieces:
    """Fills ``token`` and ``token_bytes`` of the workers' Logprobs messages (each spelling computed once)."""

    def __init__(self, tokenizer: GGUFTokenizer) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, tuple[str, bytes]] = {}

    def piece(self, token_id: int) -> tuple[str, bytes]:
        found = self._cache.get(token_id)
        if found is None:
            raw = self.tokenizer.token_bytes(token_id)
            found = self._cache[token_id] = (token_text(raw), raw)
        return found

    def _fill(self, entry: common_pb2.TokenLogprob) -> None:
        entry.token, entry.token_bytes = self.piece(entry.token_id)

    def spell(self, logprobs: Iterable[common_pb2.Logprobs]) -> list[common_pb2.Logprobs]:
        out = []
        for lp in logprobs:
            self._fill(lp.sampled)
            for alt in lp.top:
                self._fill(alt)
            out.append(lp)
        return out
