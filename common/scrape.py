"""Reading a /metrics page, with prometheus_client's own text parser: the benchmarks, the fault matrix and the tests
read the services' counters through here."""

from __future__ import annotations

import ssl
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (name, sorted labels) -> value


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(port: int, host: str = "127.0.0.1", timeout_s: float = 5.0,
           ssl_context: ssl.SSLContext | None = None) -> Samples:
    """Every sample of the /metrics page on ``host:port``; over HTTPS with ``ssl_context`` (a stack with identities
    serves its metrics so, to clients presenting one: ``Stack.scrape``)."""
    scheme = "https" if ssl_context is not None else "http"
    with urllib.request.urlopen(f"{scheme}://{host}:{port}/metrics", timeout=timeout_s, context=ssl_context) as reply:
        return parse(reply.read().decode())


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 when there are none)."""
    wanted = set(labels.items())
    return sum(v for (n, lbls), v in samples.items() if n == name and wanted <= set(lbls))
