from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BlockHeader(_message.Message):
    __slots__ = ("key", "token_count", "nbytes", "crc32", "shm_offset", "data", "kv_dtype", "mac")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    SHM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    KV_DTYPE_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    key: str
    token_count: int
    nbytes: int
    crc32: int
    shm_offset: int
    data: bytes
    kv_dtype: str
    mac: bytes
    def __init__(self, key: _Optional[str] = ..., token_count: _Optional[int] = ..., nbytes: _Optional[int] = ..., crc32: _Optional[int] = ..., shm_offset: _Optional[int] = ..., data: _Optional[bytes] = ..., kv_dtype: _Optional[str] = ..., mac: _Optional[bytes] = ...) -> None: ...

class PutChunk(_message.Message):
    __slots__ = ("header", "data", "lease_id", "lease_ttl_s", "shm_name")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    SHM_NAME_FIELD_NUMBER: _ClassVar[int]
    header: BlockHeader
    data: bytes
    lease_id: str
    lease_ttl_s: float
    shm_name: str
    def __init__(self, header: _Optional[_Union[BlockHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., lease_id: _Optional[str] = ..., lease_ttl_s: _Optional[float] = ..., shm_name: _Optional[str] = ...) -> None: ...

class PutReply(_message.Message):
    __slots__ = ("stored", "duplicates")
    STORED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    stored: int
    duplicates: int
    def __init__(self, stored: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("keys", "wait_s", "lease_id", "shm_name")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    SHM_NAME_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    wait_s: float
    lease_id: str
    shm_name: str
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., wait_s: _Optional[float] = ..., lease_id: _Optional[str] = ..., shm_name: _Optional[str] = ...) -> None: ...

class GetChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: BlockHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[BlockHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class LookupReply(_message.Message):
    __slots__ = ("present_prefix",)
    PRESENT_PREFIX_FIELD_NUMBER: _ClassVar[int]
    present_prefix: int
    def __init__(self, present_prefix: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("keys", "lease_id", "lease_ttl_s", "create")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    lease_id: str
    lease_ttl_s: float
    create: bool
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., lease_id: _Optional[str] = ..., lease_ttl_s: _Optional[float] = ..., create: _Optional[bool] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("lease_id", "lease_ttl_s")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_S_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    lease_ttl_s: float
    def __init__(self, lease_id: _Optional[str] = ..., lease_ttl_s: _Optional[float] = ...) -> None: ...

class LeaseReply(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    def __init__(self, blocks: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsReply(_message.Message):
    __slots__ = ("blocks", "bytes_used", "capacity_bytes", "leased_blocks", "leases", "evictions", "checksum_failures", "shm_bytes", "mac_failures", "shm_files")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_USED_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEASED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FAILURES_FIELD_NUMBER: _ClassVar[int]
    SHM_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAC_FAILURES_FIELD_NUMBER: _ClassVar[int]
    SHM_FILES_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    bytes_used: int
    capacity_bytes: int
    leased_blocks: int
    leases: int
    evictions: int
    checksum_failures: int
    shm_bytes: int
    mac_failures: int
    shm_files: int
    def __init__(self, blocks: _Optional[int] = ..., bytes_used: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., leased_blocks: _Optional[int] = ..., leases: _Optional[int] = ..., evictions: _Optional[int] = ..., checksum_failures: _Optional[int] = ..., shm_bytes: _Optional[int] = ..., mac_failures: _Optional[int] = ..., shm_files: _Optional[int] = ...) -> None: ...
