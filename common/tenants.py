"""Callers of the public API, by bearer token, and the tenant each token belongs to (the router and the HTTP edge).

A token file (``--auth-token-file``) has one ``NAME TOKEN`` per line, or a bare ``TOKEN`` for the tenant ``default``;
blank lines and lines starting with ``#`` are skipped. A tenant may have several tokens: to rotate one, add the new
line, move its callers over, delete the old line (the file is read again when it changes, at most once a second).
A presented token is compared, in constant time, with every known one (never stopping at a match), and tokens are
never logged. ``$PDSERVE_AUTH_TOKEN`` holds one bare token where no file is given.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from pathlib import Path

log = logging.getLogger("pdserve.tenants")

DEFAULT_TENANT = "default"
TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MIN_TOKEN_CHARS = 8
TOKEN_ENV = "PDSERVE_AUTH_TOKEN"
RELOAD_EVERY_S = 1.0


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the line, never the token."""


def parse_tokens(text: str, source: str = "tokens") -> dict[bytes, str]:
    """sha256(token) -> tenant, from a token file's text."""
    out: dict[bytes, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2:
            raise TokenFileError(f"{source} line {number}: expected 'NAME TOKEN' or 'TOKEN'")
        tenant, token = (DEFAULT_TENANT, words[0]) if len(words) == 1 else words
        if not TENANT_NAME.fullmatch(tenant):
            raise TokenFileError(f"{source} line {number}: a tenant name is 1..64 of A-Z a-z 0-9 _ . -")
        if len(token) < MIN_TOKEN_CHARS or not token.isprintable():
            raise TokenFileError(f"{source} line {number}: a token has at least {MIN_TOKEN_CHARS} printable characters")
        digest = hashlib.sha256(token.encode()).digest()
        if digest in out:
            raise TokenFileError(f"{source} line {number}: this token is already listed")
        out[digest] = tenant
    if not out:
        raise TokenFileError(f"{source}: no token in it")
    return out


class Tenants:
    """Who a bearer token belongs to; with no tokens configured, every caller is the tenant ``default``."""

    def __init__(self, path: str | None = None, token: str | None = None) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._checked_at = 0.0
        self._tokens: dict[bytes, str] = {}
        if path:
            self._load(initial=True)
        elif token:
            self._tokens = parse_tokens(token, f"${TOKEN_ENV}")

    @classmethod
    def from_flag(cls, path: str | None) -> Tenants:
        """From ``--auth-token-file`` (or $PDSERVE_AUTH_TOKEN); a bad file stops the service naming the flag."""
        try:
            return cls(path, os.environ.get(TOKEN_ENV) or None)
        except (OSError, TokenFileError) as exc:
            raise SystemExit(f"--auth-token-file: {getattr(exc, 'strerror', None) or exc}") from None

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    @property
    def names(self) -> list[str]:
        return sorted(set(self._tokens.values()))

    def _load(self, initial: bool = False) -> None:
        st = os.stat(self.path)
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._seen:
            return
        try:
            self._tokens = parse_tokens(Path(self.path).read_text(), self.path)
        except (OSError, TokenFileError) as exc:
            if initial:
                raise
            log.error("token file not reloaded (the previous tokens stay): %s", exc)
        self._seen = seen

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if self.path and now - self._checked_at >= RELOAD_EVERY_S:
            self._checked_at = now
            try:
                self._load()
            except OSError as exc:
                log.error("token file not reloaded (the previous tokens stay): %s", exc.strerror)

    def tenant_of(self, authorization: str | bytes | None) -> str | None:
        """The tenant of an ``authorization`` header value (``Bearer <token>``); None for a missing or unknown
        token. Without configured tokens: ``default`` for everyone."""
        self._maybe_reload()
        if not self._tokens:
            return DEFAULT_TENANT
        if isinstance(authorization, bytes):
            authorization = authorization.decode(errors="replace")
        scheme, _, token = (authorization or "").partition(" ")
        digest = hashlib.sha256(token.strip().encode()).digest()
        found = None
        for known, tenant in self._tokens.items():  # every entry, whatever matched: constant time
            if hmac.compare_digest(known, digest) and scheme.lower() == "bearer":
                found = tenant
        return found
