"""Errors with machine-readable details (google.rpc, via grpcio-status), as every service answers them.

The plain details string stays what it always was (``field: message``), so clients that read only the string keep
working; the rich status travels in the ``grpc-status-details-bin`` trailer, decoded with
``grpc_status.rpc_status.from_call(error)``:

- INVALID_ARGUMENT carries ``google.rpc.BadRequest`` with one ``FieldViolation`` naming the field;
- RESOURCE_EXHAUSTED carries ``google.rpc.RetryInfo`` with the delay after which a retry may succeed.
"""

from __future__ import annotations

import re
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from pdserve.engine.params import InvalidParameter

FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w.\[\]]*): ")
RETRY_AFTER_S = 1.0  # what RESOURCE_EXHAUSTED suggests: the queues of a busy stack drain in about that long


def rich_status(code: grpc.StatusCode, message: str, *details) -> grpc.Status:
    """A grpc.Status whose trailer holds google.rpc.Status with ``details`` (protobuf messages) packed into it."""
    packed = []
    for detail in details:
        any_detail = any_pb2.Any()
        any_detail.Pack(detail)
        packed.append(any_detail)
    return rpc_status.to_status(status_pb2.Status(code=code.value[0], message=message, details=packed))


def invalid_status(exc: InvalidParameter) -> grpc.Status:
    description = str(exc).removeprefix(f"{exc.field}: ")
    violation = error_details_pb2.BadRequest.FieldViolation(field=exc.field, description=description)
    return rich_status(grpc.StatusCode.INVALID_ARGUMENT, str(exc), error_details_pb2.BadRequest(
        field_violations=[violation]))


def exhausted_status(message: str, retry_after_s: float = RETRY_AFTER_S) -> grpc.Status:
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(retry_after_s * 1e9))
    return rich_status(grpc.StatusCode.RESOURCE_EXHAUSTED, message, error_details_pb2.RetryInfo(retry_delay=delay))


def violated_field(err: grpc.RpcError) -> str | None:
    """The field an INVALID_ARGUMENT error names: its BadRequest.FieldViolation, else the ``field: `` prefix of its
    details (a peer that sends no rich status)."""
    try:
        status = rpc_status.from_call(err)
    except ValueError:  # a trailer that does not match the call's code and details
        status = None
    for detail in status.details if status is not None else ():
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request) and bad_request.field_violations:
            return bad_request.field_violations[0].field
    match = FIELD_PREFIX.match(err.details() or "")
    return match.group(1) if match else None


# Each abort_* helper ends the RPC: context.abort raises, so none of them returns (code after a call is not reached).
async def abort_status(context: grpc.aio.ServicerContext, status: grpc.Status) -> NoReturn:
    await context.abort(status.code, status.details, status.trailing_metadata)


async def abort_invalid(context: grpc.aio.ServicerContext, exc: InvalidParameter) -> NoReturn:
    """INVALID_ARGUMENT: ``field: message``, with a BadRequest.FieldViolation naming the field."""
    await abort_status(context, invalid_status(exc))


async def abort_exhausted(context: grpc.aio.ServicerContext, message: str, retry_after_s: float = RETRY_AFTER_S) -> NoReturn:
    """RESOURCE_EXHAUSTED with a RetryInfo."""
    await abort_status(context, exhausted_status(message, retry_after_s))


async def abort_code(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """Any code, with the details its code calls for: RESOURCE_EXHAUSTED its RetryInfo, INVALID_ARGUMENT a
    FieldViolation for the ``field: `` the message starts with."""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        await abort_exhausted(context, message)
    match = FIELD_PREFIX.match(message)
    if code == grpc.StatusCode.INVALID_ARGUMENT and match:
        await abort_invalid(context, InvalidParameter(match.group(1), message[match.end():]))
    await context.abort(code, message)
