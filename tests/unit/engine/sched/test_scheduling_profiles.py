"""The step policies of the serving software the scheduler models (engine/scheduling/), on lightweight sequences: how
prompts and decodes share steps, what admission reserves, who gives way when KV runs out, whole-prompt scheduling,
each profile's defaults for the hardware, and data-parallel attention's ranks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.flags import SchedulerOverrides, scheduler_config
from pdserve.engine.sched.profiles import PROFILES, SGLANG_POLICY, VLLM_POLICY, VLLM_V0_POLICY, HardwareFacts
from pdserve.engine.sched.ranks import AttentionRanks
from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole, StepOutput
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.sim.sequence import SimSequence, free_kv, run_decode, run_prefill

H200_TP8 = HardwareFacts(143_771, 8)


def seqs(*lengths: int, out: int = 50) -> list[SimSequence]:
    return [SimSequence(i, list(range(100, 100 + n)), out, 1 << 20, [], 0.0) for i, n in enumerate(lengths)]


def step_once(s) -> tuple[list[tuple[int, int]], list[int]]:
    """Run one step; returns (index, tokens) per prompt chunk and the indexes that decoded."""
    step = s.schedule()
    shape = ([(q.index, n) for q, n in step.prefills], [q.index for q in step.decodes])
    s.postprocess(step, StepOutput(run_prefill(step.prefills, 0.0), run_decode(step.decodes, 0.0)))
    return shape


def running(policy, *lengths, kv_blocks=None, **limits) -> tuple[Scheduler, list[SimSequence]]:
    """A both-role scheduler with these sequences admitted and past their first token."""
    s = Scheduler(SchedulerConfig(SchedulerRole.BOTH, kv_blocks=kv_blocks, block_tokens=16, policy=policy, **limits), free_kv)
    ss = seqs(*lengths)
    for q in ss:
        s.add(q)
    while s.waiting:
        step_once(s)
    return s, ss


def test_sglang_runs_prefill_first_in_steps_of_its_own_and_decodes_wait():
    s, old = running(SGLANG_POLICY, 40, 40, max_num_batched_tokens=64)
    [new] = seqs(150)
    new.index = 9
    s.add(new)
    shapes = [step_once(s) for _ in range(4)]
    # the 150-token prompt takes three 64-token steps; the two running requests decode only after them
    assert shapes[:3] == [([(9, 64)], []), ([(9, 64)], []), ([(9, 22)], [])]
    assert shapes[3] == ([], [0, 1, 9])


def test_vllm_mixes_decodes_first_and_prompt_chunks_in_one_budget():
    s, old = running(VLLM_POLICY, 40, 40, max_num_batched_tokens=64)
    [new] = seqs(150)
    new.index = 9
    s.add(new)
    shapes = [step_once(s) for _ in range(3)]
    # every running request decodes in every step, taking one token of the budget; the prompt gets the other 62
    assert shapes == [([(9, 62)], [0, 1]), ([(9, 62)], [0, 1]), ([(9, 26)], [0, 1])]


def test_vllm_v0_runs_whole_prompts_and_keeps_a_watermark_free():
    s = Scheduler(SchedulerConfig(SchedulerRole.BOTH, max_num_batched_tokens=100, kv_blocks=100, policy=VLLM_V0_POLICY),
                  free_kv)
    for q in seqs(60, 60):
        s.add(q)
    assert step_once(s) == ([(0, 60)], [])  # the second does not fit the budget whole: the next step
    assert step_once(s) == ([(1, 60)], [])
    watermark = Scheduler(SchedulerConfig(SchedulerRole.BOTH, kv_blocks=100, policy=replace(VLLM_V0_POLICY, watermark=0.1)),
                          free_kv)
    for q in seqs(800, 800):  # 50 blocks each; the second would leave 0 free, under the 10-block watermark
        watermark.add(q)
    assert step_once(watermark) == ([(0, 800)], [])
    assert step_once(watermark) == ([], [0])


def test_sglang_admission_reserves_the_running_requests_growth():
    # two running requests may still grow by 49 tokens each: at ratio 0.7 that is 69 tokens held back; a new 48-token
    # prompt (+50 of its own) then does not fit the 160 tokens of free KV under SGLang's rule; vLLM admits it
    for policy, admitted in ((SGLANG_POLICY, False), (VLLM_POLICY, True)):
        s, _ = running(policy, 40, 40, kv_blocks=16)  # 256 tokens; each running one holds 48
        [new] = seqs(48)
        new.index = 9
        s.add(new)
        prefills, _ = step_once(s)
        assert bool(prefills) is admitted, policy.name


@pytest.mark.parametrize("policy, victim, at_head", [
    (replace(SGLANG_POLICY, reserve_decode=False), 0, False),  # retraction: fewest generated, then longest prompt
    (VLLM_POLICY, 2, True),  # the newest running request
])
def test_who_gives_way_when_kv_runs_out(policy, victim, at_head):
    s, ss = running(policy, 31, 30, 30, kv_blocks=8, max_num_batched_tokens=256)  # 128 tokens for three growing
    later = SimSequence(7, list(range(100, 200)), 5, 1 << 20, [], 0.0)  # waits: 7 blocks are never free
    s.add(later)
    for _ in range(100):
        step_once(s)
        if s.num_preemptions:
            break
    assert s.num_preemptions == 1 and victim in [q.index for q in s.waiting] and ss[victim].kv.length == 0
    if policy.preemption == "retract":  # the ratio restarts from what the survivors had made (+20 steps each)
        survivors = s.running  # each has decoded once more since, in the step that followed the retraction
        expected = (sum(len(q.output_ids) - 1 for q in survivors) + 20 * len(survivors)) / (50 * len(survivors) + 1)
        assert s.new_token_ratio == pytest.approx(expected)
    order = [q.index for q in s.waiting]
    assert order == ([victim, 7] if at_head else [7, victim])  # requeued at the head (vLLM) or the tail (SGLang)


def test_profiles_resolve_their_own_defaults_for_the_hardware():
    sgl = PROFILES["sglang"].limits(H200_TP8)
    assert (sgl.max_num_batched_tokens, sgl.max_prefill_tokens, sgl.mem_fraction) == (8192, 16384, 0.897)
    assert not sgl.policy.mixed and sgl.policy.reserve_decode and sgl.policy.preemption == "retract"
    dp = PROFILES["sglang"].limits(replace(H200_TP8, attention_dp=8))
    assert dp.max_num_batched_tokens == 1024 and dp.policy.new_token_ratio == pytest.approx(0.21)
    assert PROFILES["sglang"].max_running(675_000, H200_TP8, sgl) == 2109  # 675,000 / 163,840 x 512
    vllm = PROFILES["vllm"].limits(H200_TP8)
    assert (vllm.max_num_batched_tokens, vllm.max_num_seqs, vllm.mem_fraction) == (8192, 1024, 0.90)
    assert vllm.policy.mixed and vllm.policy.dispatch == "least_loaded"
    assert PROFILES["vllm-0.7"].limits(H200_TP8).max_num_batched_tokens == 163_840  # MLA: no chunked prefill
    assert PROFILES["sglang-0.4"].limits(replace(H200_TP8, attention_dp=8)).max_num_batched_tokens == 4096


def test_the_newest_releases_resolve_their_own_defaults():
    """SGLang v0.5.23 reserves prefill CUDA graphs (on by default) and per disaggregated role; vLLM v0.34 gives GPUs of
    160 GiB a larger batch tier; both keep A100s and small parts in their small tiers (figures from the releases'
    arg_groups/memory_hook.py and engine/arg_utils.py)."""
    new = PROFILES["sglang-0.5.23"]
    assert (new.limits(H200_TP8).max_num_batched_tokens, new.limits(H200_TP8).mem_fraction) == (8192, 0.893)
    mla = replace(H200_TP8, mla=True)
    assert new.limits(mla).mem_fraction == 0.886  # 1.5 GiB of MLA prefill graphs on top of the decode graphs
    assert new.limits(replace(mla, role="prefill")).mem_fraction == 0.893  # no decode graphs
    assert new.limits(replace(mla, role="decode")).mem_fraction == 0.929  # 2,048 tokens of activations, 10 GiB floor
    deepep = replace(mla, role="decode", attention_dp=8, deepep=True)
    assert new.limits(deepep).mem_fraction == 0.818 and new.limits(deepep).max_num_batched_tokens == 1024
    l4 = HardwareFacts(23_034, 1)
    assert PROFILES["sglang"].limits(l4).max_num_batched_tokens == 2048
    assert new.limits(l4).max_num_batched_tokens == 4096
    b200 = HardwareFacts(171_661, 8, gpu_name="B200")
    assert (PROFILES["vllm"].limits(b200).max_num_batched_tokens, PROFILES["vllm-0.34"].limits(b200).max_num_batched_tokens) \
        == (8192, 16384)
    h200 = PROFILES["vllm-0.34"].limits(replace(H200_TP8, gpu_name="H200"))
    assert (h200.max_num_batched_tokens, h200.max_num_seqs, h200.mem_fraction) == (8192, 1024, 0.92)
    a100 = HardwareFacts(81_920, 1, gpu_name="A100-80G")
    for name in ("vllm", "vllm-0.34"):
        assert (PROFILES[name].limits(a100).max_num_batched_tokens, PROFILES[name].limits(a100).max_num_seqs) \
            == (2048, 256)


def test_every_knob_can_be_overridden():
    o = SchedulerOverrides(max_num_seqs=7, max_num_batched_tokens=99, max_prefill_tokens=50, step_composition="mixed",
                           schedule_conservativeness=0.5, preemption="newest", dp_dispatch="least_loaded")
    profile = PROFILES["sglang"]
    c = scheduler_config(profile, profile.limits(H200_TP8), H200_TP8, o, SchedulerRole.BOTH, 600_000, 100, 16)
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.max_prefill_tokens) == (7, 99, 50)
    p = c.policy
    assert p.mixed and p.preemption == "newest" and p.dispatch == "least_loaded"
    assert p.new_token_ratio == pytest.approx(0.35)
    assert SchedulerOverrides.parse("max_num_seqs=512,mem_fraction=0.82") == SchedulerOverrides(512, mem_fraction=0.82)
    v0 = PROFILES["vllm-0.7"]  # whole prompts in steps of their own; a mixed step chunks them into its budget
    assert not v0.limits(H200_TP8).policy.chunked
    mixed = scheduler_config(v0, v0.limits(H200_TP8), H200_TP8, SchedulerOverrides(step_composition="mixed"),
                             SchedulerRole.BOTH, 600_000, 100, 16).policy
    assert mixed.mixed and mixed.chunked
    with pytest.raises(ValueError, match="^step_composition"):
        SchedulerOverrides(step_composition="interleaved")
    with pytest.raises(ValueError, match="^scheduler: 'chunk'"):
        SchedulerOverrides.parse("chunk=3")


def test_attention_ranks_dispatch_schedule_and_step_together():
    config = SchedulerConfig(SchedulerRole.BOTH, max_num_batched_tokens=64, kv_blocks=64, policy=SGLANG_POLICY)
    ranks = AttentionRanks(config, 4, free_kv)
    prompts = seqs(100, 30, 30, 30, 30)
    for q in prompts:
        ranks.add(q)
    assert [len(r.waiting) for r in ranks.ranks] == [2, 1, 1, 1]  # round robin
    step = ranks.schedule()
    assert [[(q.index, n) for q, n in r.prefills] for r in step.ranks] == [[(0, 64)], [(1, 30)], [(2, 30)], [(3, 30)]]
    ranks.postprocess(step, StepOutput(run_prefill(step.prefills, 0.0), run_decode(step.decodes, 0.0)))
    # next step: rank 0 continues its prompt while the others decode: one step, different modes per rank
    step = ranks.schedule()
    assert [(bool(r.prefills), len(r.decodes)) for r in step.ranks] == [(True, 0), (False, 1), (False, 1),
                                                                      (False, 1)]
    assert step.rank_batches()[1] == ([], [31])
    assert ranks.budget.total_blocks == 4 * 64
    least = AttentionRanks(replace(config, policy=replace(SGLANG_POLICY, dispatch="least_loaded")), 2, free_kv)
    for q in seqs(10, 10, 10):
        least.add(q)
    least.ranks[0].waiting.clear()
    least.add(seqs(10)[0])
    assert len(least.ranks[0].waiting) == 1 and len(least.ranks[1].waiting) == 1


def test_a_deployment_reaches_its_profile_with_its_role_and_attention():
    """The deployment's role and MLA attention reach SGLang v0.5.23's reserve (prefill graphs off a decode instance,
    decode graphs off a prefill one): the same 8 x H20-141G node, three memory fractions."""
    d = parse_deployment("hardware=H20-141G,software=sglang-0.5.23")
    fractions = {role: modeled_scheduling(d, role).deployment.mem_fraction for role in SchedulerRole}
    assert fractions == {SchedulerRole.PREFILL: 0.893, SchedulerRole.DECODE: 0.929, SchedulerRole.BOTH: 0.886}
