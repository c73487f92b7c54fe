"""The request fields of OpenAI's and vLLM's APIs that pdserve does not serve, and what the edge does with the rest.

A client that sends one of these fields with a value other than its neutral one gets a 400 naming the field: never a
200 with less than it asked for. Fields nobody lists are ignored, as OpenAI and vLLM do, and logged once per name
(vLLM's warning), so a typo or a newer client's field is visible in the edge's log.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pdserve.openai_server.errors import ApiError

log = logging.getLogger("pdserve.openai")

# field -> the values that ask for nothing (the field's default); anything else is refused
REFUSED_BOTH: dict[str, tuple] = {
    "prompt_logprobs": (None,),
    "use_beam_search": (None, False),
    "length_penalty": (None, 1, 1.0),
    "early_stopping": (None, False),
    "logits_processors": (None, []),
    "priority": (None, 0),
    "return_tokens_as_token_ids": (None, False),
    "return_token_ids": (None, False),
    "spaces_between_special_tokens": (None, True),
    "guided_decoding_backend": (None,),
    "guided_whitespace_pattern": (None,),
    "kv_transfer_params": (None,),
    "vllm_xargs": (None,),
    "mm_processor_kwargs": (None,),
    "lora_request": (None,),
    "best_of": (None, 1),
    "prediction": (None,),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "store": (None, False),
    "service_tier": (None, "auto", "default"),
    "reasoning_effort": (None,),
    "web_search_options": (None,),
    "metadata": (None,),
}
REFUSED_CHAT: dict[str, tuple] = {
    "chat_template": (None,),
    "chat_template_kwargs": (None, {}),
    "documents": (None, []),
    "echo": (None, False),
    "functions": (None, []),
    "function_call": (None, "none"),
    "parallel_tool_calls": (None, True, False),
    "add_special_tokens": (None, False),
}
REFUSED_COMPLETION: dict[str, tuple] = {
    "add_special_tokens": (None, True),
    "response_format": (None, {"type": "text"}),
}
MAX_LOGGED_NAMES = 1024  # the set of names already logged stays bounded whatever clients send

_logged: set[str] = set()
_lock = threading.Lock()


def check_extras(extras: dict[str, Any] | None, chat: bool) -> None:
    """400 for a refused field set to something pdserve would not honour; log each other unknown name once."""
    refused = {**REFUSED_BOTH, **(REFUSED_CHAT if chat else REFUSED_COMPLETION)}
    for name, value in (extras or {}).items():
        if name in refused:
            if not any(value == neutral and type(value) is type(neutral) or value is neutral
                       for neutral in refused[name]):
                raise ApiError.invalid(name, "is not supported by pdserve (leave it unset)")
            continue
        log_unknown(name)


def log_unknown(name: str) -> None:
    with _lock:
        if name in _logged or len(_logged) >= MAX_LOGGED_NAMES:
            return
        _logged.add(name)
    log.warning("the request field %r is not recognized and is ignored", name[:64])
