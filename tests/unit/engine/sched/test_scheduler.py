"""The one scheduler in its three roles: chunked prefill, decode under a KV budget with preemption, and both."""

import numpy as np
import pytest

from pdserve.engine.kv.budget import KVBudgetExceeded
from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import SamplingParams
from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole
from pdserve.engine.text.stop import FinishReason

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


def prompts(runtime, lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, runtime.config.vocab_size, n).tolist() for n in lengths]


def run_to_end(runtime, scheduler):
    produced = {}
    while scheduler.has_work():
        step = scheduler.schedule()
        for seq, result in scheduler.postprocess(step, runtime.execute(step)):
            produced.setdefault(seq.request_id, []).append(result)
    return produced


def test_prefill_role_chunks_long_prompts_and_hands_the_sequence_back(tiny_runtime):
    rt = tiny_runtime
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.PREFILL, max_num_batched_tokens=16), rt.free)
    seqs = [rt.new_sequence(p, GREEDY) for p in prompts(rt, (40, 5))]
    for seq in seqs:
        scheduler.add(seq)
    steps = []
    while scheduler.has_work():
        step = scheduler.schedule()
        steps.append([(s.request_id, n) for s, n in step.prefills])
        assert not step.decodes  # a prefill worker never decodes
        scheduler.postprocess(step, rt.execute(step))
    a, b = seqs
    # 16 tokens a step, first come first served: the long prompt's chunks first, the short one fills the rest
    assert steps == [[(a.request_id, 16)], [(a.request_id, 16)], [(a.request_id, 8), (b.request_id, 5)]]
    for seq in seqs:  # each left with one sampled token and its whole prompt's KV, for the kvstore
        assert len(seq.output_ids) == 1 and seq.kv.length == len(seq.prompt_ids)
    reference = LLMEngine(rt).generate([s.prompt_ids for s in seqs], SamplingParams(max_tokens=1, temperature=0.0))
    assert [s.output_ids for s in seqs] == [r.output_ids for r in reference]


def test_decode_role_preempts_frees_and_recomputes_with_unchanged_output(tiny_runtime):
    rt = tiny_runtime
    ps = prompts(rt, (20, 20, 20, 20), seed=1)
    expected = [s.output_ids for s in LLMEngine(rt).generate(ps, GREEDY)]
    # 12 blocks of 16 tokens; each sequence grows to 60 tokens (4 blocks): four cannot run together
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.DECODE, kv_blocks=12), rt.free)
    seqs = [rt.new_sequence(p, GREEDY) for p in ps]
    for seq in seqs:
        scheduler.add(seq)
    preempted_memory = []
    free = scheduler.free_kv

    def free_and_look(seq):
        free(seq)
        if not seq.finished:  # preempted: its arrays must be gone, not only its blocks
            preempted_memory.append(seq.kv.k.size + seq.kv.v.size)
    scheduler.free_kv = free_and_look
    run_to_end(rt, scheduler)
    assert scheduler.num_preemptions >= 1
    assert preempted_memory and all(size == 0 for size in preempted_memory)
    assert [s.output_ids for s in seqs] == expected
    assert scheduler.budget.used == 0 and not scheduler.budget.held


def test_decode_role_admits_imported_kv_without_a_prefill_step(tiny_runtime):
    rt = tiny_runtime
    [prompt] = prompts(rt, (37,), seed=2)
    prefilled = rt.new_sequence(prompt, GREEDY)
    rt.prefill([(prefilled, len(prompt))])
    seq = rt.new_sequence(prompt, GREEDY)
    for i in range(prefilled.kv.num_blocks):
        seq.kv.append_block(prefilled.kv.export_block(i), min(16, len(prompt) - 16 * i))
    seq.continue_from(prefilled.output_ids[0])
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.DECODE, kv_blocks=64), rt.free)
    scheduler.add(seq)
    step = scheduler.schedule()
    assert not step.prefills and step.decodes == [seq]
    scheduler.postprocess(step, rt.execute(step))
    assert seq.output_ids == LLMEngine(rt).generate([prompt], SamplingParams(max_tokens=2, temperature=0.0))[0].output_ids
    scheduler.abort(seq)


def test_a_request_larger_than_the_whole_budget_is_refused_up_front(tiny_runtime):
    rt = tiny_runtime
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.DECODE, kv_blocks=4), rt.free)
    with pytest.raises(KVBudgetExceeded, match="4 blocks"):
        scheduler.add(rt.new_sequence(list(range(3, 40)), SamplingParams(max_tokens=40)))
    scheduler.add(rt.new_sequence(list(range(3, 40)), SamplingParams(max_tokens=20)))  # 57 tokens: 4 blocks fit


def test_abort_removes_the_sequence_and_frees_its_blocks(tiny_runtime):
    rt = tiny_runtime
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.DECODE, kv_blocks=64), rt.free)
    seqs = [rt.new_sequence(p, GREEDY) for p in prompts(rt, (10, 12), seed=3)]
    for seq in seqs:
        scheduler.add(seq)
    step = scheduler.schedule()
    scheduler.postprocess(step, rt.execute(step))
    step = scheduler.schedule()
    scheduler.postprocess(step, rt.execute(step))
    assert len(scheduler.running) == 2
    result = scheduler.abort(seqs[0])
    assert result.finish_reason is FinishReason.ABORT and seqs[0].finished
    assert scheduler.running == [seqs[1]] and seqs[0].kv.length == 0
    assert scheduler.abort(seqs[0]) is None  # already gone: nothing freed twice
    scheduler.abort(seqs[1])
    assert scheduler.budget.used == 0


def test_config_checks_itself():
    with pytest.raises(ValueError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)
    with pytest.raises(ValueError, match="kv_blocks"):
        SchedulerConfig(kv_blocks=0)
