"""``pdserve perf``: one scenario explained, as a table or as JSON."""

from __future__ import annotations

from perfmodel.hardware import gpu as gpu_by_name
from perfmodel.memory import memory_fit
from perfmodel.models import model_profile
from perfmodel.parallel import ParallelConfig
from perfmodel.timing import TimingModel


def scenario_report(model: str, hardware: str, gpus: int, tp: int, ep: int, prefill_lens: list[int],
                    decode_batch: int, context_len: int, software: str = "sglang", dp_attention: bool = False,
                    link: str = "nvlink") -> dict:
    m = model_profile(model)
    g = gpu_by_name(hardware)
    p = ParallelConfig(gpus, tp, ep, dp_attention)
    tm = TimingModel(m, g, p, software)
    prefill = tm.prefill_time(prefill_lens)
    decode = tm.decode_step_time([context_len] * decode_batch) if decode_batch else None
    fit = memory_fit(m, g, p)
    prompt_tokens = sum(prefill_lens)
    kv_per_request = [m.kv_bytes_per_token * n for n in prefill_lens]
    report = {
        "scenario": {"model": m.name, "hardware": g.name, "parallel": p.describe(), "software": software,
                     "prefill_lens": prefill_lens, "decode_batch": decode_batch, "context_len": context_len},
        "prefill": {
            "seconds": prefill.seconds,
            "tokens_per_second": prompt_tokens / prefill.seconds,
            "tokens_per_second_per_gpu": prompt_tokens / prefill.seconds / gpus,
            "tokens_per_second_per_node": prompt_tokens / prefill.seconds / p.nodes,
            "steps": prefill.steps,
            "breakdown": prefill.as_dict(),
        },
        "ttft_seconds": tm.software.request_overhead_s + prefill.seconds,
        "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_bytes_per_request": kv_per_request,
        "kv_transfer_seconds": [tm.kv_transfer_time(n, link) for n in prefill_lens],
        "kv_transfer_link": link,
        "memory": dict(fit.as_dict(), max_batch_at_context=fit.max_batch(max(1, context_len))),
    }
    if decode is not None:
        report["decode"] = {
            "step_seconds": decode.seconds,
            "tpot_seconds": decode.seconds,
            "tokens_per_second": decode_batch / decode.seconds,
            "tokens_per_second_per_gpu": decode_batch / decode.seconds / gpus,
            "tokens_per_second_per_node": decode_batch / decode.seconds / p.nodes,
            "breakdown": decode.as_dict(),
            "kv_read_bytes_per_step": decode_batch * context_len * m.kv_bytes_per_token,
        }
    return report


def _ms(s: float) -> str:
    return f"{s * 1e3:10.3f} ms"


def format_report(r: dict) -> str:
    s = r["scenario"]
    lines = [f"{s['model']} on {s['hardware']}: {s['parallel']} ({s['software']} software profile)", ""]
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
    lines += [f"KV cache: {r['kv_bytes_per_token']:,.0f} bytes per token; per request "
              + ", ".join(f"{b / 1e6:.2f} MB" for b in r["kv_bytes_per_request"])
              + f"; transfer over {r['kv_transfer_link']}: "
              + ", ".join(f"{t * 1e6:.0f} us" for t in r["kv_transfer_seconds"])]
    mem = r["memory"]
    lines += [f"memory per GPU: weights {mem['weight_bytes_per_gpu'] / 1e9:.1f} GB, reserved "
              f"{mem['reserved_bytes_per_gpu'] / 1e9:.1f} GB, free for KV {mem['kv_bytes_free_per_gpu'] / 1e9:.1f} GB "
              f"of {mem['hbm_bytes_per_gpu'] / 1e9:.0f} GB -> {mem['max_kv_tokens']:,} KV tokens, at most "
              f"{mem['max_batch_at_context']:,} sequences of {s['context_len']} tokens"
              + ("" if mem["fits"] else "   DOES NOT FIT")]
    for title, key in (("prefill breakdown", "prefill"), ("decode step breakdown", "decode")):
        if key not in r:
            continue
        lines += ["", f"{title}:"]
        for part, seconds in r[key]["breakdown"].items():
            lines.append(f"  {part:<16}{_ms(seconds)}")
    return "\n".join(lines)
