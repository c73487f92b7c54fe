"""The soak's counts of handled faults (streams resumed, prompts recomputed) add up across process restarts: each
process's counter starts from 0 again under a new pid, and a process that cannot be scraped is skipped."""

from types import SimpleNamespace

from pdserve.bench.faults.chaos import HANDLED
from pdserve.bench.faults.soak import Soak


class Stack:
    def __init__(self) -> None:
        self.processes: list[SimpleNamespace] = []
        self.values: dict[int, float] = {}  # pid -> the counter's value on its /metrics page

    def run(self, name: str, module: str, pid: int, value: float, state: str = "serving") -> None:
        self.processes = [p for p in self.processes if p.name != name]
        self.processes.append(SimpleNamespace(name=name, module=module, pid=pid, state=state))
        self.values[pid] = value

    def scrape(self, p) -> dict:
        if p.pid not in self.values:
            raise ConnectionRefusedError(p.name)
        [(metric, labels)] = [(m, tuple(lbls.items())) for module, m, lbls in HANDLED.values() if module == p.module]
        return {(metric, labels): self.values[p.pid], ("pdserve_router_retries_total", (("phase", "prefill"),)): 99.0}


def test_counts_survive_restarts_and_unreachable_processes():
    stack = Stack()
    soak = Soak(stack)
    stack.run("router", "router", 10, 2.0)
    stack.run("decode-0", "decode_server", 20, 1.0)
    soak.count_handled()
    stack.run("router", "router", 10, 5.0)
    soak.count_handled()
    assert soak.handled == {"resumed": 5.0, "kv_recomputed": 1.0}
    stack.run("router", "router", 11, 1.0)  # restarted: its counter begins again
    stack.run("decode-0", "decode_server", 21, 0.0, state="starting")  # not serving yet: not read
    del stack.values[21]
    soak.count_handled()
    stack.run("decode-0", "decode_server", 21, 3.0)
    soak.count_handled()
    soak.count_handled()  # nothing new: nothing added
    assert soak.handled == {"resumed": 6.0, "kv_recomputed": 4.0}
