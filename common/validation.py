"""Request checks shared by the services. Each raises InvalidParameter naming the field and limit.

A worker checks a request once, where it enters (:func:`check_worker_request`); the router checks what clients send
and forwards the sampling message unchanged.
"""

from __future__ import annotations

from pdserve.common.convert import sampling_from_proto
from pdserve.engine.params import InvalidParameter, SamplingParams, validate_request
from pdserve.v1 import common_pb2

MAX_REQUEST_ID_CHARS = 128
MAX_SALT_CHARS = 256  # a request's cache_salt, and the salt the router derives from it


def check_request_id(request_id: str) -> str:
    # ASCII: the id travels on as x-request-id metadata, and gRPC metadata values are ASCII
    if not request_id or len(request_id) > MAX_REQUEST_ID_CHARS or not (request_id.isascii() and request_id.isprintable()):
        raise InvalidParameter("request_id", f"must be 1..{MAX_REQUEST_ID_CHARS} printable ASCII characters")
    return request_id


def check_worker_request(request_id: str, prompt_ids, sampling: common_pb2.SamplingParams, vocab_size: int,
                         context_length: int, ids_field: str) -> tuple[list[int], SamplingParams]:
    """What every worker checks of a request: its id, prompt ids and sampling parameters, against its model."""
    check_request_id(request_id)
    return validate_request(prompt_ids, sampling_from_proto(sampling), vocab_size, context_length, ids_field)

