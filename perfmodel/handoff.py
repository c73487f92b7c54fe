"""The prefill-to-decode hand-off of one request: the handshake, the KV transfer over RDMA (or NVLink inside a node)
and what the decode side does before the first token goes out. One definition: the simulator (sim/cluster.py) and
the paced decode workers (worker/clock.py, ``pdserve up --pace realtime``) both call :meth:`HandOff.seconds`.

How the serving stacks do it (read from their sources):

- SGLang (``python/sglang/srt/disaggregation/``: prefill.py, decode.py, mooncake/conn.py). The router sends each
  request to a prefill and a decode server at once with a bootstrap room. The decode side pre-allocates the request's
  KV pages first (its *prealloc queue*; a request waits there while the KV pool is full), then sends the page indices
  to the prefill ranks over ZMQ (after a one-off lookup at the prefill's bootstrap server). The prefill's *bootstrap
  queue* lets the request into its waiting queue only once that arrived; both queues are polled once per scheduler
  iteration (with a CPU all-reduce over the TP ranks). After each prefill chunk's forward, the chunk's KV pages are
  written into the decode's pre-allocated pages by the Mooncake transfer engine (RDMA writes, contiguous pages merged
  per layer); the last chunk's transfer cannot hide behind compute. The decode side's *transfer queue* is polled once
  per decode iteration; then the request joins the running batch and its first token (sampled by prefill) goes out.
- vLLM V1 with the NixlConnector (``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``). The proxy sends
  the prompt to prefill (max_tokens 1); its reply carries the block ids; the decode scheduler then pulls them with NIXL
  READs (one descriptor per block per layer; the agents' metadata is exchanged once per engine pair and cached) while
  the request waits in WAITING_FOR_REMOTE_KVS: the KV loads asynchronously and the request is scheduled at the first
  step after it finished.

Which NICs carry it: MLA's latent KV is replicated over attention tensor-parallel ranks, so each decode attention
shard receives a whole copy from its own prefill rank (SGLang maps decode rank r to prefill rank r mod prefill TP) on
its own NIC: a transfer lasts (KV bytes / one NIC) however wide the TP groups are, and occupies that many NICs. With
GQA the heads are split: min(prefill shards, decode shards, KV heads) NICs carry one share each. A GPU reaches the NIC
at its PCIe switch; with fewer NICs than GPUs (H20 servers: 4 for 8) two GPUs share one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MICRO = 1e-6
NVLINK_LATENCY_S = 10 * MICRO
PCIE_BANDWIDTH = 25e9  # staged through host memory
LINKS = ("nvlink", "rdma", "pcie")


@dataclass(frozen=True)
class TransferEngine:
    """How one KV transfer library moves a request's KV, and what the stack around it adds per request."""

    name: str
    handshake_s: float  # per request: the control messages and the poll of the idle loops that see them
    latency_s: float  # per transfer: submit the batch of RDMA operations and see it complete
    per_op_s: float  # per RDMA operation (one page of one layer, after merging contiguous pages)
    page_tokens: int  # KV page the operations move (FlashMLA's 64-token pages for MLA on both stacks)
    streaming: str  # "chunk": each prefill chunk's KV leaves after its forward; "after": once the whole prefill is done
    merges_pages: bool  # contiguous pages become one operation per layer
    # when the client sees the first token once the KV has landed: "loops" (SGLang: the router streams the decode's
    # output only once the prefill's reply is back too, which its loop sends at its next turn, and the decode's loop
    # admits the request at its next turn), "decode_step" (vLLM: the decode computes the first token in its first step)
    first_token: str
    source: str


ENGINES: dict[str, TransferEngine] = {
    # Mooncake TransferEngine under SGLang: per request, the decode's page indices go to the prefill ranks over ZMQ
    # (one round trip, ~0.1 ms on a data-center network) and each side's event loop sees the message at its next
    # iteration (an idle loop spins: ~1 ms per poll with its CPU all-reduce) [E]. Batch submit + completion poll of
    # the transfer ~30 us [E]; ~1 us to post one RDMA write [E].
    "mooncake": TransferEngine("mooncake", handshake_s=2.0e-3, latency_s=30 * MICRO, per_op_s=1 * MICRO,
                               page_tokens=64, streaming="chunk", merges_pages=True,
                               first_token="loops",
                               source="sgl-project/sglang python/sglang/srt/disaggregation/mooncake/conn.py; "
                                      "kvcache-ai/Mooncake docs (transfer engine batch API); the router waiting for "
                                      "both replies: sgl-project/sglang issue 22853"),
    # NIXL under vLLM V1: the reply of the prefill (an HTTP round trip through the proxy) carries the block ids; the
    # decode pulls with one READ descriptor per block per layer, no merging; its scheduler sees the finished load at
    # the next step [E for the figures; mechanism from nixl_connector.py].
    "nixl": TransferEngine("nixl", handshake_s=3.0e-3, latency_s=50 * MICRO, per_op_s=1 * MICRO, page_tokens=64,
                           streaming="after", merges_pages=False, first_token="decode_step",
                           source="vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py"),
}


def default_engine(software: str) -> str:
    return "nixl" if software.startswith("vllm") else "mooncake"


def transfer_engine(name: str) -> TransferEngine:
    if name not in ENGINES:
        raise ValueError(f"transfer_engine: unknown {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name]


@dataclass(frozen=True)
class Side:
    """What the hand-off needs of one instance: its attention shards, its GPUs and their NICs."""

    attention_shards: int
    gpus: int
    gpus_per_node: int
    nics: int  # per node (perfmodel/nics.py)
    nic_bandwidth: float  # bytes/s one NIC really moves
    nvlink_bandwidth: float  # bytes/s between two GPUs of a node, both directions

    @property
    def nic_count(self) -> int:
        """NICs the instance's GPUs reach (at least one)."""
        return max(1, self.nics * self.gpus // self.gpus_per_node)

    @classmethod
    def of(cls, timing) -> "Side":
        p, g = timing.parallel, timing.gpu
        # a transfer between two GPUs of one node: a whole NVLink port, or one link of a point-to-point mesh
        return cls(p.attention_shards, p.gpus, p.gpus_per_node, g.nics, g.nic_bandwidth, g.group_bandwidth(2))


class HandOff:
    """The hand-off between one prefill and one decode deployment (same model)."""

    def __init__(self, prefill: Side, decode: Side, kv_bytes_per_token: float, n_layers: int, mla: bool,
                 kv_heads: int, engine: TransferEngine) -> None:
        self.prefill, self.decode, self.engine = prefill, decode, engine
        self.kv_bytes_per_token = kv_bytes_per_token
        self.n_layers = n_layers
        if mla:  # each decode shard gets a whole copy on its own NIC
            self.flows, self.share = decode.attention_shards, 1.0
        else:
            self.flows = max(1, min(prefill.attention_shards, decode.attention_shards, kv_heads or 1))
            self.share = 1.0 / self.flows
        # one flow runs at one NIC's rate: the slower side's
        self.flow_bandwidth = min(prefill.nic_bandwidth, decode.nic_bandwidth)
        self.nvlink_bandwidth = min(prefill.nvlink_bandwidth, decode.nvlink_bandwidth) / 2  # one direction
        # concurrent transfers out of one prefill instance into one decode instance before either side's NICs are
        # all busy
        self.lanes = max(1, min(prefill.nic_count, decode.nic_count) // min(self.flows, prefill.nic_count))

    @classmethod
    def between(cls, prefill_timing, decode_timing, engine: str = "") -> "HandOff":
        """From the two deployments' timing models (``perfmodel.timing.TimingModel``); ``engine`` "": the prefill's
        software's default (Mooncake for SGLang, NIXL for vLLM)."""
        m = prefill_timing.model
        name = engine or default_engine(prefill_timing.software.name)
        return cls(Side.of(prefill_timing), Side.of(decode_timing), m.kv_bytes_per_token, m.n_layers, m.attention == "mla",
                   m.n_kv_heads, transfer_engine(name))

    # --- what one request's hand-off costs ----------------------------------------------------------------------------
    def operations(self, tokens: int) -> int:
        """RDMA operations of one flow: one per page per layer, or per layer when contiguous pages merge (a freshly
        pre-allocated request's pages are one run)."""
        pages = math.ceil(tokens / self.engine.page_tokens)
        return self.n_layers * (1 if self.engine.merges_pages else pages)

    def wire_seconds(self, tokens: int, link: str = "rdma") -> float:
        """Moving ``tokens`` tokens of KV: latency + operations + bytes over one flow's bandwidth."""
        if link not in LINKS:
            raise ValueError(f"link: {link!r} is not one of {', '.join(LINKS)}")
        if tokens <= 0:
            return 0.0
        nbytes = tokens * self.kv_bytes_per_token * self.share
        if link == "nvlink":
            return NVLINK_LATENCY_S + nbytes / self.nvlink_bandwidth
        bandwidth = PCIE_BANDWIDTH if link == "pcie" else self.flow_bandwidth
        return self.engine.latency_s + self.operations(tokens) * self.engine.per_op_s + nbytes / bandwidth

    def exposed_tokens(self, tokens: int, chunk_tokens: int = 0) -> int:
        """Tokens whose KV is still to move when the prefill has finished: the last chunk's when each chunk's KV leaves
        after its forward (SGLang), else all of them."""
        if self.engine.streaming == "chunk" and chunk_tokens and tokens > chunk_tokens:
            return tokens - (math.ceil(tokens / chunk_tokens) - 1) * chunk_tokens
        return tokens

    def seconds(self, tokens: int, link: str = "rdma", chunk_tokens: int = 0) -> float:
        """The hand-off after the prefill sampled the first token until the decode side holds the KV: the handshake
        and the exposed part of the transfer. When the first token then reaches the client (the loops' turns,
        ``TransferEngine.first_token``) is the simulator's to play out, step by step (sim/cluster.py)."""
        return self.engine.handshake_s + self.wire_seconds(self.exposed_tokens(tokens, chunk_tokens), link)

    def kv_bytes(self, tokens: int) -> float:
        """Bytes on the wire for one request: every flow's share."""
        return tokens * self.kv_bytes_per_token * self.share * self.flows


def placed_link(prefill_gpus: int, decode_gpus: int, gpus_per_node: int) -> str:
    """The link the simulator's placement gives one prefill and one decode instance (packed in order, a multi-node
    instance starting a node): NVLink when both fit in one node, RDMA otherwise."""
    return "nvlink" if prefill_gpus + decode_gpus <= gpus_per_node else "rdma"
