"""``pdserve perf``: one scenario explained, as a table or as JSON; ``--explain`` shows the arithmetic per group."""

from __future__ import annotations

from pdserve.perfmodel.costs import Breakdown
from pdserve.perfmodel.deployment import Deployment, check_scenario
from pdserve.perfmodel.handoff import placed_link
from pdserve.perfmodel.memory import RESERVED_FRACTION


def scenario_report(d: Deployment, prefill_lens: list[int], decode_batch: int, context_len: int,
                    link: str = "nvlink") -> dict:
    """The modeled figures of one scenario; raises ValueError (naming the field) for one that cannot run."""
    check_scenario(d, prefill_lens, decode_batch, context_len)
    m, g, p, tm = d.profile(), d.gpu(), d.parallel(), d.timing()
    fit = d.memory()
    if link == "auto":  # where the simulator places a prefill and a decode instance of this deployment
        link = placed_link(d.gpus, d.gpus, d.gpus_per_node)
    handoff = d.handoff()
    report = {
        "scenario": {"model": m.name, "hardware": g.name, "parallel": p.describe(), "software": d.software,
                     "kv_precision": m.kv_precision, "prefill_lens": prefill_lens, "decode_batch": decode_batch,
                     "context_len": context_len, "overheads": tm.overheads.source,
                     "mem_fraction": d.mem_fraction or 1.0 - RESERVED_FRACTION},
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_bytes_per_request": [m.kv_bytes_per_token * n for n in prefill_lens],
        "kv_transfer_seconds": [tm.kv_transfer_time(n, link) for n in prefill_lens],
        "kv_transfer_link": link,
        # the whole hand-off (handshake + transfer, perfmodel/handoff.py), as the simulator and paced workers price it
        "kv_handoff_seconds": [handoff.seconds(n, link) for n in prefill_lens],
        "kv_handoff": {"engine": handoff.engine.name, "flows_per_request": handoff.flows,
                       "concurrent_transfers": handoff.lanes, "flow_bandwidth": handoff.flow_bandwidth,
                       "nics_per_node": g.nics},
        "memory": dict(fit.as_dict(), max_batch_at_context=fit.max_batch(max(1, context_len))),
    }
    if prefill_lens:
        prefill = tm.prefill_time(prefill_lens)
        tokens = sum(prefill_lens)
        report["prefill"] = {
            "seconds": prefill.seconds,
            "tokens_per_second": tokens / prefill.seconds,
            "tokens_per_second_per_gpu": tokens / prefill.seconds / d.gpus,
            "tokens_per_second_per_node": tokens / prefill.seconds / p.nodes,
            "steps": prefill.steps,
            "breakdown": prefill.as_dict(),
            "explain": explain(prefill),
        }
        report["ttft_seconds"] = tm.overheads.request_overhead_s + prefill.seconds
    if decode_batch:
        decode = tm.decode_step_time([context_len] * decode_batch)
        report["decode"] = {
            "step_seconds": decode.seconds,
            "tpot_seconds": decode.seconds,
            "tokens_per_second": decode_batch / decode.seconds,
            "tokens_per_second_per_gpu": decode_batch / decode.seconds / d.gpus,
            "tokens_per_second_per_node": decode_batch / decode.seconds / p.nodes,
            "breakdown": decode.as_dict(),
            "explain": explain(decode),
            "kv_read_bytes_per_step": decode_batch * context_len * m.kv_bytes_per_token,
        }
    return report


def explain(b: Breakdown) -> dict[str, dict]:
    """Per operator group on the busiest GPU: FLOPs, bytes, compute and memory seconds, the bound, the factors."""
    out = {}
    for name, g in b.groups.items():
        out[name] = {"flops": g.flops, "bytes": g.bytes, "compute_seconds": g.compute_s, "memory_seconds": g.memory_s,
                     "seconds": b.parts.get(name, g.seconds),
                     "bound": {"communication": "link", "overhead": "fitted"}.get(name, g.bound), "factors": dict(g.factors)}
    return out


def _ms(s: float) -> str:
    return f"{s * 1e3:10.3f} ms"


def format_explain(title: str, groups: dict[str, dict]) -> list[str]:
    lines = ["", f"{title} (busiest GPU):",
             f"  {'group':<16}{'GFLOP':>12}{'GB moved':>10}{'compute ms':>12}{'memory ms':>11}{'ms':>10}  bound    factors"]
    for name, g in groups.items():
        factors = ", ".join(f"{k} {v:.2f}" for k, v in g["factors"].items())
        if name in ("communication", "overhead"):
            kind = "link" if name == "communication" else "fitted"
            lines.append(f"  {name:<16}{'':>12}{'':>10}{'':>12}{'':>11}{g['seconds'] * 1e3:>10.3f}  {kind:<8} {factors}")
            continue
        lines.append(f"  {name:<16}{g['flops'] / 1e9:>12,.1f}{g['bytes'] / 1e9:>10.3f}{g['compute_seconds'] * 1e3:>12.3f}"
                     f"{g['memory_seconds'] * 1e3:>11.3f}{g['seconds'] * 1e3:>10.3f}  {g['bound']:<8} {factors}")
    return lines


def format_report(r: dict, show_explain: bool = False) -> str:
    s = r["scenario"]
    lines = [f"{s['model']} on {s['hardware']}: {s['parallel']} ({s['software']} software profile, KV "
             f"{s['kv_precision']}; overheads: {s['overheads']})", ""]
    if "prefill" in r:
        pf = r["prefill"]
        lines += [f"prefill {s['prefill_lens']} tokens: {_ms(pf['seconds'])} in {pf['steps']} step(s)   "
                  f"{pf['tokens_per_second']:,.0f} tok/s ({pf['tokens_per_second_per_gpu']:,.0f} per GPU, "
                  f"{pf['tokens_per_second_per_node']:,.0f} per node)",
                  f"TTFT (request overhead + prefill): {_ms(r['ttft_seconds'])}"]
    if "decode" in r:
        d = r["decode"]
        lines += [f"decode step, batch {s['decode_batch']} at context {s['context_len']}: {_ms(d['step_seconds'])}   "
                  f"= TPOT; {d['tokens_per_second']:,.0f} tok/s ({d['tokens_per_second_per_gpu']:,.0f} per GPU, "
                  f"{d['tokens_per_second_per_node']:,.0f} per node)"]
    if r["kv_bytes_per_request"]:
        lines += [f"KV cache: {r['kv_bytes_per_token']:,.0f} bytes per token; per request "
                  + ", ".join(f"{b / 1e6:.2f} MB" for b in r["kv_bytes_per_request"])
                  + f"; transfer over {r['kv_transfer_link']}: "
                  + ", ".join(f"{t * 1e6:.0f} us" for t in r["kv_transfer_seconds"])]
        h = r["kv_handoff"]
        lines += [f"KV hand-off ({h['engine']}, {h['flows_per_request']} NIC flow(s) of "
                  f"{h['flow_bandwidth'] / 1e9:.0f} GB/s per request, {h['concurrent_transfers']} at once per prefill "
                  f"instance; {h['nics_per_node']} NICs per node), handshake included: "
                  + ", ".join(f"{t * 1e3:.2f} ms" for t in r["kv_handoff_seconds"])]
    mem = r["memory"]
    lines += [f"memory per GPU (weights + KV: {s['mem_fraction']:.3f} of it): weights "
              f"{mem['weight_bytes_per_gpu'] / 1e9:.1f} GB, reserved "
              f"{mem['reserved_bytes_per_gpu'] / 1e9:.1f} GB, free for KV {mem['kv_bytes_free_per_gpu'] / 1e9:.1f} GB "
              f"of {mem['hbm_bytes_per_gpu'] / 1e9:.1f} GB usable -> {mem['max_kv_tokens']:,} KV tokens, at most "
              f"{mem['max_batch_at_context']:,} sequences of {s['context_len']} tokens"]
    for title, key in (("prefill breakdown", "prefill"), ("decode step breakdown", "decode")):
        if key not in r:
            continue
        if show_explain:
            lines += format_explain(title, r[key]["explain"])
            lines.append(f"  {'total':<16}{'':>55}{r[key]['breakdown']['total'] * 1e3:>10.3f}")
            continue
        lines += ["", f"{title}:"]
        for part, seconds in r[key]["breakdown"].items():
            lines.append(f"  {part:<16}{_ms(seconds)}")
    if show_explain:
        lines += ["", "weights per GPU: " + ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in mem["weights"].items())]
    return "\n".join(lines)
