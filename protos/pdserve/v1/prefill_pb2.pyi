from pdserve.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "token_ids", "sampling", "lease_ttl_s", "lease_id", "cache_salt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: _common_pb2.SamplingParams
    lease_ttl_s: float
    lease_id: str
    cache_salt: str
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., lease_ttl_s: _Optional[float] = ..., lease_id: _Optional[str] = ..., cache_salt: _Optional[str] = ...) -> None: ...

class PrefillReply(_message.Message):
    __slots__ = ("first", "kv", "cached_tokens", "queue_wall_s", "compute_wall_s", "kv_store_wall_s", "modeled_s", "queue_modeled_s", "forks", "frontend_modeled_s", "next_turn_modeled_s")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    KV_STORE_WALL_S_FIELD_NUMBER: _ClassVar[int]
    MODELED_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    FORKS_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    NEXT_TURN_MODELED_S_FIELD_NUMBER: _ClassVar[int]
    first: _common_pb2.TokenStep
    kv: _common_pb2.KVHandle
    cached_tokens: int
    queue_wall_s: float
    compute_wall_s: float
    kv_store_wall_s: float
    modeled_s: float
    queue_modeled_s: float
    forks: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenStep]
    frontend_modeled_s: float
    next_turn_modeled_s: float
    def __init__(self, first: _Optional[_Union[_common_pb2.TokenStep, _Mapping]] = ..., kv: _Optional[_Union[_common_pb2.KVHandle, _Mapping]] = ..., cached_tokens: _Optional[int] = ..., queue_wall_s: _Optional[float] = ..., compute_wall_s: _Optional[float] = ..., kv_store_wall_s: _Optional[float] = ..., modeled_s: _Optional[float] = ..., queue_modeled_s: _Optional[float] = ..., forks: _Optional[_Iterable[_Union[_common_pb2.TokenStep, _Mapping]]] = ..., frontend_modeled_s: _Optional[float] = ..., next_turn_modeled_s: _Optional[float] = ...) -> None: ...
