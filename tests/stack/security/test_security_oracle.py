"""The prefix-cache oracle (CVE-2025-46570 in vLLM): another caller guesses a victim's secret by sending candidate
prompts and watching ``cached_prompt_tokens`` (or timing, or the kvstore's Lookup). On the default stack blocks are
named under a salt the router derives from the caller's tenant (and the request's cache_salt): no guess from another
tenant ever hits the victim's blocks, so the right one looks exactly like the wrong ones. Within a tenant the cache
still works, and a cache_salt scopes it further."""

import asyncio

from pdserve.client.client import PdserveClient
from pdserve.engine.kv.blocks import block_keys
from pdserve.router.tenancy import TenantSalts
from tests.stack.conftest import TENANTS

DIGITS = list(range(100, 110))  # token ids standing for 0..9


def secret_prompt(pin: str) -> list[int]:
    """A 20-token prompt whose first block (16 tokens) holds the PIN: a hit on that block gives the PIN away."""
    return [3, 4, 5, 6, 7, 8, 9, 10, 11, 12] + [DIGITS[int(d)] for d in pin] + [13, 14, 15, 16, 17, 18]


def cached(stack, tenant: str, prompt: list[int], cache_salt: str = "") -> int:
    with PdserveClient(stack.router_target, token=TENANTS[tenant]) as c:
        return c.complete(token_ids=prompt, max_tokens=1, cache_salt=cache_salt).usage.cached_prompt_tokens


def test_another_tenant_cannot_tell_the_right_guess(tenant_stack):
    stack = tenant_stack
    assert cached(stack, "alice", secret_prompt("4821")) == 0
    assert cached(stack, "alice", secret_prompt("4821")) == 16  # the victim's own repeat hits: caching works
    guesses = [f"{n:04d}" for n in range(4811, 4831)]  # 20 guesses, the PIN among them
    seen = {pin: cached(stack, "mallory", secret_prompt(pin)) for pin in guesses}
    assert set(seen.values()) == {0}  # the right guess looks like every wrong one
    assert cached(stack, "mallory", secret_prompt("4821")) == 16  # mallory's own earlier prompt: its own cache


def test_a_cache_salt_scopes_the_cache_within_a_tenant(tenant_stack):
    stack = tenant_stack
    prompt = secret_prompt("7777")
    assert cached(stack, "alice", prompt, cache_salt="user-1") == 0
    assert cached(stack, "alice", prompt, cache_salt="user-1") == 16
    assert cached(stack, "alice", prompt, cache_salt="user-2") == 0  # same tenant, another salt: nothing shared
    assert cached(stack, "alice", prompt) == 0  # mixed into the tenant's salt, never replacing it


def test_the_kvstore_holds_nothing_under_names_computable_from_the_tokens(tenant_stack):
    """Lookup is for prefill identities only (test_security_roles.py); even they find the victim's prompt only
    under the tenant's salted names, which need the stack's key to compute."""
    stack = tenant_stack
    prompt = secret_prompt("1234")
    cached(stack, "alice", prompt)
    with PdserveClient(stack.router_target, token=TENANTS["alice"]) as c:
        fingerprint = c.list_models().models[0].fingerprint
    salt = TenantSalts(stack.identities.identity("router").kv_key).salt("alice")

    async def lookups():
        kv = stack.kv_client("prefill")
        try:
            return (await kv.lookup(block_keys(prompt, fingerprint, 16)),
                    await kv.lookup(block_keys(prompt, fingerprint, 16, salt=salt)))
        finally:
            await kv.close()
    assert asyncio.run(lookups()) == (0, 1)
