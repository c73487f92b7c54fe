from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CorruptRequest(_message.Message):
    __slots__ = ("key", "keep_checksum_valid")
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHECKSUM_VALID_FIELD_NUMBER: _ClassVar[int]
    key: str
    keep_checksum_valid: bool
    def __init__(self, key: _Optional[str] = ..., keep_checksum_valid: _Optional[bool] = ...) -> None: ...

class CorruptResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
