"""A public port that would carry bearer tokens in clear beyond this host says so at start."""

import logging

from pdserve.common.tls import TLSConfig, is_loopback, warn_if_tokens_in_clear


def test_tokens_on_a_plaintext_port_beyond_loopback_are_warned(caplog):
    caplog.set_level(logging.WARNING)
    assert warn_if_tokens_in_clear("0.0.0.0", 50050, TLSConfig(), True, "router")
    assert "travel in clear on 0.0.0.0:50050" in caplog.text
    assert not warn_if_tokens_in_clear("127.0.0.1", 50050, TLSConfig(), True, "router")
    assert not warn_if_tokens_in_clear("::1", 50050, TLSConfig(), True, "router")
    assert not warn_if_tokens_in_clear("0.0.0.0", 50050, TLSConfig(), False, "router")  # no tokens: warned elsewhere
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")
