"""What a kvstore shard measures: what it holds, what it is asked, and how long each operation takes."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import RPC_BUCKETS

BYTES_USED = Gauge("pdserve_kvstore_used_bytes",
                   "Bytes of the budget in use: blocks with their overhead, lease bookkeeping, Puts still arriving")
PUTS_ARRIVING = Gauge("pdserve_kvstore_put_arriving_bytes", "Bytes of blocks whose Put is still arriving (charged)")
CAPACITY = Gauge("pdserve_kvstore_capacity_bytes", "Byte budget of this kvstore")
BLOCKS = Gauge("pdserve_kvstore_blocks", "Blocks held")
LEASED = Gauge("pdserve_kvstore_leased_blocks", "Blocks held by at least one lease")
LEASES = Gauge("pdserve_kvstore_leases", "Live leases (one per request whose KV waits for decode)")
HITS = Counter("pdserve_kvstore_hits_total", "Blocks asked for and found (lookup/acquire: the present prefix)", ["op"])
MISSES = Counter("pdserve_kvstore_misses_total", "Blocks asked for and not found (lookup/acquire: past the prefix)",
                 ["op"])
OP_SECONDS = Histogram("pdserve_kvstore_operation_seconds", "Time of one kvstore operation, streaming included",
                       ["op"], buckets=RPC_BUCKETS)
EVICTIONS = Counter("pdserve_kvstore_evictions_total", "Blocks evicted (least recently used, unleased)")
CHECKSUM_FAILURES = Counter("pdserve_kvstore_checksum_failures_total", "Blocks whose bytes failed their checksum")
MAC_FAILURES = Counter("pdserve_kvstore_mac_failures_total",
                       "Blocks refused (Put) or dropped (Get) because their MAC did not match: forged or altered")
PUT_BYTES = Counter("pdserve_kvstore_put_bytes_total", "Bytes received in Put")
GET_BYTES = Counter("pdserve_kvstore_get_bytes_total", "Bytes served by Get")
WAITING_GETS = Gauge("pdserve_kvstore_waiting_gets", "Gets waiting for blocks their writer has not stored yet")
SHM_BYTES = Counter("pdserve_kvstore_shm_bytes_total", "Block bytes moved through shared memory (Put and Get)")
