"""The router's flags are checked once, outside its main, and built into a RouterConfig."""

from __future__ import annotations

import pytest

from pdserve.kvstore.contract import MAX_LEASE_TTL_S
from pdserve.router.config import RouterConfig, check_flags
from pdserve.router.server import build_parser


def args(*flags: str):
    return build_parser().parse_args(list(flags))


@pytest.mark.parametrize("flags, named", [
    (["--prefill", "nohost"], "--prefill"),
    (["--decode", "a:b"], "--decode"),
    (["--max-streams-per-connection", "0"], "--max-streams-per-connection"),
    (["--max-prompt-chars", "0"], "--max-prompt-chars"),
    (["--tokenizer-workers", "0"], "--tokenizer-workers"),
    (["--tenant-max-inflight", "-1"], "--tenant-max-inflight"),
    (["--tenant-max-queued-tokens", "-1"], "--tenant-max-queued-tokens"),
    (["--kvstore", ""], "--kvstore"),
    (["--lease-ttl-s", "0"], "--lease-ttl-s"),
    (["--lease-ttl-s", str(MAX_LEASE_TTL_S + 1)], "--lease-ttl-s"),
])
def test_each_bad_flag_is_named(flags, named):
    with pytest.raises(ValueError) as err:
        check_flags(args(*flags))
    assert str(err.value).startswith(named)


def test_good_flags_pass_at_the_edges():
    check_flags(args())
    check_flags(args("--lease-ttl-s", str(MAX_LEASE_TTL_S), "--tenant-max-inflight", "0",
                     "--max-streams-per-connection", "1"))
    check_flags(args("--colocated", "--kvstore", ""))  # a colocated router needs no kvstore


def test_the_config_holds_what_the_flags_say():
    c = RouterConfig.from_args(args("--prefill", "127.0.0.1:1,127.0.0.1:2", "--policy", "round_robin",
                                    "--served-model-name", "served", "--lease-ttl-s", "12"), "file", 2048, "fp")
    assert c.prefill_targets == ("127.0.0.1:1", "127.0.0.1:2") and c.kvstore_targets == ("127.0.0.1:50051",)
    assert (c.model_name, c.context_length, c.fingerprint, c.policy, c.lease_ttl_s) == \
        ("served", 2048, "fp", "round_robin", 12.0)
    colocated = RouterConfig.from_args(args("--colocated"), "file", 2048, "fp")
    assert colocated.model_name == "file" and colocated.prefill_targets == () and colocated.kvstore_targets == ()
