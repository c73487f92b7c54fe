from pdserve.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DecodeRequest(_message.Message):
    __slots__ = ("request_id", "prompt_ids", "first_token", "kv", "sampling", "colocated", "resume_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    COLOCATED_FIELD_NUMBER: _ClassVar[int]
    RESUME_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_ids: _containers.RepeatedScalarFieldContainer[int]
    first_token: int
    kv: _common_pb2.KVHandle
    sampling: _common_pb2.SamplingParams
    colocated: bool
    resume_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., prompt_ids: _Optional[_Iterable[int]] = ..., first_token: _Optional[int] = ..., kv: _Optional[_Union[_common_pb2.KVHandle, _Mapping]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., colocated: _Optional[bool] = ..., resume_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PrefetchRequest(_message.Message):
    __slots__ = ("request_id", "kv")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    kv: _common_pb2.KVHandle
    def __init__(self, request_id: _Optional[str] = ..., kv: _Optional[_Union[_common_pb2.KVHandle, _Mapping]] = ...) -> None: ...

class PrefetchResponse(_message.Message):
    __slots__ = ("token_count", "fetch_wall_s")
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    FETCH_WALL_S_FIELD_NUMBER: _ClassVar[int]
    token_count: int
    fetch_wall_s: float
    def __init__(self, token_count: _Optional[int] = ..., fetch_wall_s: _Optional[float] = ...) -> None: ...

class DecodeChunk(_message.Message):
    __slots__ = ("step", "kv_fetch_wall_s", "kv_transfer_modeled_s", "queue_wall_s", "decode_modeled_s", "queue_modeled_s", "prefill_modeled_s", "frontend_modeled_s")
    STEP_FIELD_NUMBER: _ClassVar[int]
    KV_FETCH_WALL_S_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    DECODE_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    step: _common_pb2.TokenStep
    kv_fetch_wall_s: float
    kv_transfer_modeled_s: float
    queue_wall_s: float
    decode_modeled_s: float
    queue_modeled_s: float
    prefill_modeled_s: float
    frontend_modeled_s: float
    def __init__(self, step: _Optional[_Union[_common_pb2.TokenStep, _Mapping]] = ..., kv_fetch_wall_s: _Optional[float] = ..., kv_transfer_modeled_s: _Optional[float] = ..., queue_wall_s: _Optional[float] = ..., decode_modeled_s: _Optional[float] = ..., queue_modeled_s: _Optional[float] = ..., prefill_modeled_s: _Optional[float] = ..., frontend_modeled_s: _Optional[float] = ...) -> None: ...
