"""``pdserve identities``: a stack's CA and one identity per role, for services started by hand, by compose (its
init service runs this) or in Kubernetes (``--k8s``: the same as Secrets, one per role, in cert-manager's layout)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
from pathlib import Path

from pdserve.common.certs import DEFAULT_DAYS, STACK_ROLES, add_trust, drop_trust, make_identities
from pdserve.common.identity import CA_FILE, CERT_FILE, KEY_FILE, KV_KEY_FILE, ROLES


def _owners(text: str) -> dict[str, int]:
    """'router=10014,prefill=10012' -> {'router': 10014, ...}"""
    out = {}
    for item in filter(None, text.split(",")):
        role, _, uid = item.partition("=")
        if role not in ROLES or not uid.isdigit():
            raise argparse.ArgumentTypeError(f"expected ROLE=UID,... with roles from {', '.join(ROLES)}; got {item!r}")
        out[role] = int(uid)
    return out


def k8s_secrets(out: Path, roles: list[str], namespace: str) -> str:
    """The identities as Kubernetes Secrets, as deploy/k8s mounts them: pdserve-<role>-identity (tls.crt, tls.key,
    ca.crt: what a cert-manager Certificate writes), pdserve-kv-key (kv-mac.key) and pdserve-tokens (tokens), as a
    YAML stream (JSON documents: YAML reads them)."""
    def secret(name: str, files: dict[str, Path], kind: str = "Opaque") -> dict:
        return {"apiVersion": "v1", "kind": "Secret", "type": kind,
                "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "pdserve"}},
                "data": {key: base64.b64encode(path.read_bytes()).decode() for key, path in files.items()}}
    docs = [secret(f"pdserve-{role}-identity", {f: out / role / f for f in (CERT_FILE, KEY_FILE, CA_FILE)},
                   "kubernetes.io/tls") for role in roles]
    kv_holder = next((out / role for role in roles if (out / role / KV_KEY_FILE).exists()), None)
    if kv_holder is not None:
        docs.append(secret("pdserve-kv-key", {KV_KEY_FILE: kv_holder / KV_KEY_FILE}))
    if (out / "tokens").exists():
        docs.append(secret("pdserve-tokens", {"tokens": out / "tokens"}))
    return "\n---\n".join(json.dumps(doc, indent=1) for doc in docs) + "\n"


def cmd_identities(a: argparse.Namespace) -> int:
    out = Path(a.out)
    if a.add_trust or a.drop_trust:
        if not (out / CA_FILE).exists():
            print(f"pdserve identities: {out} holds no identities", file=sys.stderr)
            return 2
        for pem in a.add_trust:
            add_trust(out, Path(pem).read_bytes())
        if a.drop_trust:
            drop_trust(out)
        print(f"{out}: the CAs it trusts now: {(out / CA_FILE).read_bytes().count(b'BEGIN CERTIFICATE')}", file=sys.stderr)
        return 0
    if (out / CA_FILE).exists() and not a.rotate:
        print(f"{out}: identities exist already (--rotate makes a new set)", file=sys.stderr)
    else:
        dirs = make_identities(out, a.roles, a.host, a.days, a.owner)
        print(f"{out}: a new CA and identities for {', '.join(dirs)} (valid {a.days} days)", file=sys.stderr)
    token_file = out / "tokens"
    if a.token_file_for is not None and not token_file.exists():  # the router's and the edge's, made once
        token = os.environ.get("PDSERVE_AUTH_TOKEN") or secrets.token_urlsafe(24)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"default {token}\n")
        os.chown(token_file, os.geteuid(), a.token_file_for)
        print(f"{token_file}: the public API's token for tenant default "
              f"({'from $PDSERVE_AUTH_TOKEN' if os.environ.get('PDSERVE_AUTH_TOKEN') else 'random'}; never printed)",
              file=sys.stderr)
    if a.k8s:
        sys.stdout.write(k8s_secrets(out, a.roles, a.namespace))
    return 0


def register(sub) -> None:
    p = sub.add_parser("identities", help="make a stack's CA and one identity (certificate, key) per role")
    p.add_argument("--out", required=True, help="directory: ca.crt, and one directory per role (tls.crt, tls.key, "
                                                "ca.crt, kv-mac.key)")
    p.add_argument("--roles", type=lambda t: [r for r in t.split(",") if r], default=list(STACK_ROLES),
                   help=f"comma separated, from {', '.join(ROLES)} (default: {','.join(STACK_ROLES)})")
    p.add_argument("--host", action="append", default=[],
                   help="another name or address the certificates are valid for (repeatable)")
    p.add_argument("--days", type=int, default=DEFAULT_DAYS)
    p.add_argument("--rotate", action="store_true", help="make a new set even where one exists")
    p.add_argument("--add-trust", action="append", default=[], metavar="CA_PEM",
                   help="instead: make the existing set at --out trust this CA too (rotation, docs/security.md)")
    p.add_argument("--drop-trust", action="store_true",
                   help="instead: make the existing set at --out trust only its own CA again")
    p.add_argument("--owner", type=_owners, default=None, metavar="ROLE=UID,...",
                   help="give each role's directory to that user (run as root; containers running a user per role)")
    p.add_argument("--token-file-for", type=int, default=None, metavar="GID",
                   help="also make <out>/tokens (tenant default, $PDSERVE_AUTH_TOKEN or random) readable by this group")
    p.add_argument("--k8s", action="store_true",
                   help="also print them as the Kubernetes Secrets deploy/k8s mounts (kubectl apply -f -)")
    p.add_argument("--namespace", default="pdserve", help="with --k8s")
    p.set_defaults(func=cmd_identities)
