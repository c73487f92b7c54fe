"""bench serve's OpenAI backend reads pdserve's timings from the edge's chunks and takes --base-url as vLLM does."""

import pytest

from pdserve.bench.serve.backends import BenchError, OpenAIBackend, server_timings


def test_pdserve_timings_from_the_edges_chunk_become_the_routers_field_names():
    chunk = {"choices": [], "pdserve": {"request_id": "r", "timings": {
        "wall": {"ttft_s": 0.5, "tpot_s": 0.1, "kv_handoff_s": 0.02},
        "modeled": {"ttft_s": 0.05, "e2e_s": 0.4}}}}
    assert server_timings(chunk) == {"ttft_wall_s": 0.5, "tpot_wall_s": 0.1, "kv_handoff_wall_s": 0.02,
                                     "ttft_modeled_s": 0.05, "e2e_modeled_s": 0.4}
    assert server_timings({"timings": {"ttft_modeled_s": 1, "note": "x"}}) == {"ttft_modeled_s": 1.0}
    assert server_timings({"choices": []}) == {}


@pytest.mark.parametrize("url", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"])
def test_base_url_with_or_without_v1(url):
    backend = OpenAIBackend(url)
    assert backend.root == "http://h:8000" and backend.base_url == "http://h:8000/v1"


def test_an_unknown_endpoint_names_the_flag():
    with pytest.raises(BenchError, match="--endpoint"):
        OpenAIBackend("http://h:8000", endpoint="/v1/embeddings")
