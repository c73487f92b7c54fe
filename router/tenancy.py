"""What the router keeps apart per tenant: the prefix cache (a salt per tenant), request ids, and its share of the
router (requests in flight and prompt tokens queued, each bounded, counted in metrics by tenant).

The salt a tenant's blocks are named under is derived from the tenant with a key of the stack's (so nobody outside
can compute another tenant's block names), and a request's optional ``cache_salt`` (vLLM's) is mixed into it, never
replacing it: two tenants never share a cached block, so neither can hit nor probe the other's prompts through
usage figures, timing or the kvstore; within a tenant, callers that want the same isolation send a cache_salt.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from pdserve.kvstore.mac import derive

INFLIGHT = Gauge("pdserve_tenant_requests_inflight", "Requests in flight, by tenant", ["tenant"])
QUEUED_TOKENS = Gauge("pdserve_tenant_queued_prompt_tokens", "Prompt tokens of requests not prefilled yet, by tenant",
                      ["tenant"])
ADMITTED = Counter("pdserve_tenant_requests_total", "Requests admitted, by tenant", ["tenant"])
REFUSED = Counter("pdserve_tenant_rejected_total", "Requests refused at a tenant's limit, by tenant and limit",
                  ["tenant", "limit"])
LIMITS = ("inflight", "queued_tokens")
CLIENT_ID_PART = 96  # of a client's request id, in the internal id (which workers cap at 128 characters)


class TenantSalts:
    def __init__(self, stack_key: bytes | None) -> None:
        """``stack_key``: the stack's KV key. Without one (--insecure-internal) a random key of this router's: the
        salts stay secret (a tenant cannot compute another's block names), but blocks cached before a restart of the
        router, or by another router, are not found again."""
        self._key = derive(stack_key, b"tenant-salt") if stack_key else secrets.token_bytes(32)

    def salt(self, tenant: str, cache_salt: str = "") -> str:
        message = f"{len(tenant)}:{tenant}{cache_salt}".encode()  # unambiguous: the tenant's length first
        return hmac.digest(self._key, message, "sha256").hex()


def internal_id(client_id: str) -> str:
    """The id the workers see: the client's (cut to fit), then a random suffix, so that equal client ids, of one
    tenant over time or of two tenants at once, never meet in a worker or a log line."""
    return f"{client_id[:CLIENT_ID_PART]}-{secrets.token_hex(8)}"


class TenantLimitExceeded(Exception):
    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass
class TenantSlot:
    """One admitted request's share of its tenant's limits; :meth:`prefilled` gives the queued tokens back."""

    limits: TenantLimits
    tenant: str
    tokens: int
    open: bool = field(default=True)

    def queue(self, prompt_tokens: int) -> None:
        """Count a tokenized prompt as queued for prefill; TenantLimitExceeded past the tenant's queued tokens (the
        caller closes the slot)."""
        self.limits.check_queued(self.tenant, prompt_tokens)
        self.tokens += prompt_tokens
        self.limits.queued[self.tenant] += prompt_tokens
        QUEUED_TOKENS.labels(self.tenant).inc(prompt_tokens)

    def prefilled(self) -> None:
        if self.tokens:
            self.limits.queued[self.tenant] -= self.tokens
            QUEUED_TOKENS.labels(self.tenant).dec(self.tokens)
            self.tokens = 0

    def close(self) -> None:
        if self.open:
            self.prefilled()
            self.open = False
            self.limits.inflight[self.tenant] -= 1
            INFLIGHT.labels(self.tenant).dec()


class TenantLimits:
    """Per tenant: at most ``max_inflight`` requests in flight and ``max_queued_tokens`` prompt tokens not yet
    prefilled (0: no such limit)."""

    def __init__(self, max_inflight: int, max_queued_tokens: int, tenants: list[str] = ()) -> None:
        self.max_inflight, self.max_queued_tokens = max_inflight, max_queued_tokens
        self.inflight: dict[str, int] = {}
        self.queued: dict[str, int] = {}
        for tenant in tenants:
            self._touch(tenant)

    def _touch(self, tenant: str) -> None:
        if tenant not in self.inflight:
            self.inflight[tenant] = self.queued[tenant] = 0
            INFLIGHT.labels(tenant)
            QUEUED_TOKENS.labels(tenant)
            ADMITTED.labels(tenant)
            for limit in LIMITS:
                REFUSED.labels(tenant, limit)

    def admit(self, tenant: str, prompt_tokens: int = 0) -> TenantSlot:
        """A slot for one request (or one Tokenize/Detokenize call), taken before its prompt is tokenized so that a
        tenant at its limit costs the router no tokenizing; TenantLimitExceeded (naming the limit) when the tenant
        is at one. The prompt's tokens join the slot once known (:meth:`TenantSlot.queue`)."""
        self._touch(tenant)
        if self.max_inflight and self.inflight[tenant] >= self.max_inflight:
            REFUSED.labels(tenant, "inflight").inc()
            raise TenantLimitExceeded("inflight", f"tenant {tenant!r} has {self.max_inflight} requests in flight, "
                                                  "its limit (--tenant-max-inflight)")
        self.check_queued(tenant, prompt_tokens)
        self.inflight[tenant] += 1
        INFLIGHT.labels(tenant).inc()
        ADMITTED.labels(tenant).inc()
        slot = TenantSlot(self, tenant, 0)
        if prompt_tokens:
            slot.queue(prompt_tokens)
        return slot

    def check_queued(self, tenant: str, prompt_tokens: int) -> None:
        if self.max_queued_tokens and self.queued[tenant] + prompt_tokens > self.max_queued_tokens and \
                self.queued[tenant]:  # a lone prompt longer than the limit still runs when nothing else waits
            REFUSED.labels(tenant, "queued_tokens").inc()
            raise TenantLimitExceeded("queued_tokens", f"tenant {tenant!r} has {self.queued[tenant]} prompt tokens "
                                                       f"waiting for prefill; the limit is {self.max_queued_tokens} "
                                                       "(--tenant-max-queued-tokens)")
