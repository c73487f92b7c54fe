from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "min_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "repetition_penalty", "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "ignore_eos", "include_stop_str_in_output", "repetition_max_repeats", "repetition_max_period", "n", "logprobs", "stop_when_complete", "stop_when_complete_interval", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_json_object", "allowed_token_ids", "bad_words")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    REPETITION_MAX_REPEATS_FIELD_NUMBER: _ClassVar[int]
    REPETITION_MAX_PERIOD_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STOP_WHEN_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    STOP_WHEN_COMPLETE_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    GUIDED_JSON_FIELD_NUMBER: _ClassVar[int]
    GUIDED_REGEX_FIELD_NUMBER: _ClassVar[int]
    GUIDED_CHOICE_FIELD_NUMBER: _ClassVar[int]
    GUIDED_GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    GUIDED_JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    min_tokens: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    include_stop_str_in_output: bool
    repetition_max_repeats: int
    repetition_max_period: int
    n: int
    logprobs: int
    stop_when_complete: float
    stop_when_complete_interval: int
    guided_json: str
    guided_regex: str
    guided_choice: _containers.RepeatedScalarFieldContainer[str]
    guided_grammar: str
    guided_json_object: bool
    allowed_token_ids: _containers.RepeatedScalarFieldContainer[int]
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., min_p: _Optional[float] = ..., seed: _Optional[int] = ..., repetition_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., include_stop_str_in_output: _Optional[bool] = ..., repetition_max_repeats: _Optional[int] = ..., repetition_max_period: _Optional[int] = ..., n: _Optional[int] = ..., logprobs: _Optional[int] = ..., stop_when_complete: _Optional[float] = ..., stop_when_complete_interval: _Optional[int] = ..., guided_json: _Optional[str] = ..., guided_regex: _Optional[str] = ..., guided_choice: _Optional[_Iterable[str]] = ..., guided_grammar: _Optional[str] = ..., guided_json_object: _Optional[bool] = ..., allowed_token_ids: _Optional[_Iterable[int]] = ..., bad_words: _Optional[_Iterable[str]] = ...) -> None: ...

class KVHandle(_message.Message):
    __slots__ = ("block_keys", "token_count", "block_tokens", "lease_id", "lease_ttl_s", "model_fingerprint", "wait_s", "kv_dtype")
    BLOCK_KEYS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    KV_DTYPE_FIELD_NUMBER: _ClassVar[int]
    block_keys: _containers.RepeatedScalarFieldContainer[str]
    token_count: int
    block_tokens: int
    lease_id: str
    lease_ttl_s: float
    model_fingerprint: str
    wait_s: float
    kv_dtype: str
    def __init__(self, block_keys: _Optional[_Iterable[str]] = ..., token_count: _Optional[int] = ..., block_tokens: _Optional[int] = ..., lease_id: _Optional[str] = ..., lease_ttl_s: _Optional[float] = ..., model_fingerprint: _Optional[str] = ..., wait_s: _Optional[float] = ..., kv_dtype: _Optional[str] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "token", "token_bytes")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BYTES_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    token: str
    token_bytes: bytes
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., token: _Optional[str] = ..., token_bytes: _Optional[bytes] = ...) -> None: ...

class Logprobs(_message.Message):
    __slots__ = ("sampled", "rank", "top")
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    sampled: TokenLogprob
    rank: int
    top: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, sampled: _Optional[_Union[TokenLogprob, _Mapping]] = ..., rank: _Optional[int] = ..., top: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class TokenStep(_message.Message):
    __slots__ = ("token_ids", "text", "finish_reason", "stop_reason", "logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finish_reason: str
    stop_reason: str
    logprobs: _containers.RepeatedCompositeFieldContainer[Logprobs]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish_reason: _Optional[str] = ..., stop_reason: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[Logprobs, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "total_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("queue_wall_s", "ttft_wall_s", "tpot_wall_s", "e2e_wall_s", "kv_handoff_wall_s", "queue_modeled_s", "ttft_modeled_s", "tpot_modeled_s", "e2e_modeled_s", "kv_transfer_modeled_s", "kv_store_wall_s", "kv_fetch_wall_s", "frontend_modeled_s")
    QUEUE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    TTFT_WALL_S_FIELD_NUMBER: _ClassVar[int]
    TPOT_WALL_S_FIELD_NUMBER: _ClassVar[int]
    E2E_WALL_S_FIELD_NUMBER: _ClassVar[int]
    KV_HANDOFF_WALL_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    TTFT_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    TPOT_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    E2E_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    KV_STORE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    KV_FETCH_WALL_S_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    queue_wall_s: float
    ttft_wall_s: float
    tpot_wall_s: float
    e2e_wall_s: float
    kv_handoff_wall_s: float
    queue_modeled_s: float
    ttft_modeled_s: float
    tpot_modeled_s: float
    e2e_modeled_s: float
    kv_transfer_modeled_s: float
    kv_store_wall_s: float
    kv_fetch_wall_s: float
    frontend_modeled_s: float
    def __init__(self, queue_wall_s: _Optional[float] = ..., ttft_wall_s: _Optional[float] = ..., tpot_wall_s: _Optional[float] = ..., e2e_wall_s: _Optional[float] = ..., kv_handoff_wall_s: _Optional[float] = ..., queue_modeled_s: _Optional[float] = ..., ttft_modeled_s: _Optional[float] = ..., tpot_modeled_s: _Optional[float] = ..., e2e_modeled_s: _Optional[float] = ..., kv_transfer_modeled_s: _Optional[float] = ..., kv_store_wall_s: _Optional[float] = ..., kv_fetch_wall_s: _Optional[float] = ..., frontend_modeled_s: _Optional[float] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerLoad(_message.Message):
    __slots__ = ("waiting", "running", "waiting_tokens", "kv_blocks_used", "kv_blocks_total", "model_fingerprint")
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    waiting: int
    running: int
    waiting_tokens: int
    kv_blocks_used: int
    kv_blocks_total: int
    model_fingerprint: str
    def __init__(self, waiting: _Optional[int] = ..., running: _Optional[int] = ..., waiting_tokens: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., model_fingerprint: _Optional[str] = ...) -> None: ...
