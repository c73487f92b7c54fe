"""Tenants: the token file, the salts the router names a tenant's blocks under, internal ids, per-tenant limits."""

import pytest

from pdserve.common.tenants import DEFAULT_TENANT, Tenants, TokenFileError, parse_tokens
from pdserve.router.tenancy import TenantLimitExceeded, TenantLimits, TenantSalts, internal_id


def test_token_file_lines_name_tenants_and_bad_lines_name_the_line():
    tokens = parse_tokens("# comment\n\nalice aaaaaaaa-1\nbbbbbbbb-2\nalice aaaaaaaa-3\n")
    assert sorted(tokens.values()) == ["alice", "alice", DEFAULT_TENANT]
    for text, fault in (("a b c", "line 1"), ("bad/name tokentoken", "tenant name"), ("x short", "at least"),
                        ("alice aaaaaaaa-1\nbob aaaaaaaa-1", "already listed"), ("# only\n", "no token")):
        with pytest.raises(TokenFileError, match=fault) as err:
            parse_tokens(text)
        assert "aaaaaaaa" not in str(err.value) and "tokentoken" not in str(err.value)  # never the token


def test_tenant_of_a_header_and_the_file_read_again_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "tokens"
    path.write_text("alice alice-token-1\n")
    tenants = Tenants(str(path))
    assert tenants.tenant_of("Bearer alice-token-1") == "alice" and tenants.tenant_of(b"bearer alice-token-1") == "alice"
    assert tenants.tenant_of("Bearer alice-token-2") is None and tenants.tenant_of("Basic alice-token-1") is None
    assert tenants.tenant_of(None) is None
    monkeypatch.setattr("pdserve.common.tenants.RELOAD_EVERY_S", 0.0)
    path.write_text("alice alice-token-2\nbob bob-token-0001\n")  # rotated: the old token is gone
    assert tenants.tenant_of("Bearer alice-token-2") == "alice" and tenants.tenant_of("Bearer alice-token-1") is None
    path.write_text("garbage line here\n")  # a broken file keeps the tokens that worked
    assert tenants.tenant_of("Bearer bob-token-0001") == "bob"
    assert Tenants().tenant_of(None) == DEFAULT_TENANT  # no tokens: one tenant, open


def test_salts_differ_by_tenant_and_cache_salt_and_need_the_stack_key():
    salts, other_stack = TenantSalts(b"k" * 32), TenantSalts(b"o" * 32)
    assert salts.salt("alice") == salts.salt("alice") != salts.salt("bob")
    assert salts.salt("alice", "user-1") not in (salts.salt("alice"), salts.salt("alice", "user-2"))
    assert salts.salt("alice") != other_stack.salt("alice")  # not computable without the key
    assert salts.salt("a", "b\0c") != salts.salt("a\0b", "c")


def test_internal_ids_keep_the_clients_id_and_fit_the_workers_limit():
    ids = {internal_id("job-1") for _ in range(100)}
    assert len(ids) == 100 and all(i.startswith("job-1-") for i in ids)
    assert len(internal_id("x" * 128)) <= 128


def test_tenant_limits_bound_one_tenant_not_the_others():
    limits = TenantLimits(max_inflight=2, max_queued_tokens=100, tenants=["a", "b"])
    first, second = limits.admit("a", 60), limits.admit("a", 10)
    with pytest.raises(TenantLimitExceeded, match="--tenant-max-inflight"):
        limits.admit("a", 1)
    third = limits.admit("b", 90)  # another tenant is not affected
    second.close()
    with pytest.raises(TenantLimitExceeded, match="--tenant-max-queued-tokens"):
        limits.admit("a", 50)  # 60 still queued + 50 > 100
    first.prefilled()  # its first token is out: no longer queued
    limits.admit("a", 50).close()
    first.close()
    first.close()  # idempotent
    third.close()
    assert limits.inflight == {"a": 0, "b": 0} and limits.queued == {"a": 0, "b": 0}
    assert TenantLimits(1, 10).admit("c", 500)  # a lone prompt over the token limit still runs
