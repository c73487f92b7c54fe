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

from pdserve.common.certs import DEFAULT_DAYS, STACK_ROLES, make_identities
from pdserve.common.identity import CA_FILE, ROLES


def _owners(text: str) -> dict[str, int]:
    """'router=10014,prefill=10012' -> {'router': 10014, ...}"""
    out = {}
    for item in filter(None, text.split(",")):
        role, _, uid = item.partition("=")
        if role not in ROLES or not uid.isdigit():
            raise argparse.ArgumentTypeError(f"expected ROLE=UID,... with roles from {', '.join(ROLES)}; got {item!r}")
        out[role] = int(uid)
    return out


def k8s_secrets(dirs: dict[str, Path], namespace: str) -> str:
    """Secrets named pdserve-<role>-identity (type kubernetes.io/tls, as cert-manager writes them), as a YAML stream
    (JSON documents: YAML reads them)."""
    docs = []
    for role, d in dirs.items():
        data = {f.name: base64.b64encode(f.read_bytes()).decode() for f in sorted(d.iterdir())}
        docs.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": f"pdserve-{role}-identity", "namespace": namespace,
                                  "labels": {"app.kubernetes.io/part-of": "pdserve"}}, "data": data})
    return "\n---\n".join(json.dumps(doc, indent=1) for doc in docs) + "\n"


def cmd_identities(a: argparse.Namespace) -> int:
    out = Path(a.out)
    if (out / CA_FILE).exists() and not a.rotate:
        print(f"{out}: identities exist already (--rotate makes a new set)")
    else:
        trust = [Path(p).read_bytes() for p in a.trust]
        dirs = make_identities(out, a.roles, a.host, a.days, trust, a.owner)
        print(f"{out}: a new CA and identities for {', '.join(dirs)} (valid {a.days} days)")
    token_file = out / "tokens"
    if a.token_file_for is not None and not token_file.exists():  # the router's and the edge's, made once
        token = os.environ.get("PDSERVE_AUTH_TOKEN") or secrets.token_urlsafe(24)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"default {token}\n")
        os.chown(token_file, os.geteuid(), a.token_file_for)
        if not os.environ.get("PDSERVE_AUTH_TOKEN"):
            print(f"the public API's token (tenant default), also in {token_file}: {token}")
    if a.k8s:
        dirs = {role: out / role for role in a.roles}
        sys.stdout.write(k8s_secrets(dirs, a.namespace))
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
    p.add_argument("--trust", action="append", default=[], metavar="CA_PEM",
                   help="also trust this (old) CA while rotating (repeatable)")
    p.add_argument("--rotate", action="store_true", help="make a new set even where one exists")
    p.add_argument("--owner", type=_owners, default=None, metavar="ROLE=UID,...",
                   help="give each role's directory to that user (run as root; containers running a user per role)")
    p.add_argument("--token-file-for", type=int, default=None, metavar="GID",
                   help="also make <out>/tokens (tenant default, $PDSERVE_AUTH_TOKEN or random) readable by this group")
    p.add_argument("--k8s", action="store_true", help="print the identities as Kubernetes Secrets")
    p.add_argument("--namespace", default="pdserve", help="with --k8s")
    p.set_defaults(func=cmd_identities)
