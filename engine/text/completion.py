"""The completeness rule (``stop_when_complete``): the model itself is asked whether its answer already covers the
question, and the sequence ends with finish reason ``complete`` when it says yes.

- **When.** After a token that ends a sentence (its text ends in ``. ! ? 。 ！ ？ …`` or a newline, closing quotes and
  brackets aside), past ``min_tokens``, never on the first token (prefill samples it), and at least
  ``stop_when_complete_interval`` tokens after the previous check. The schedule is a function of the tokens alone, so
  a sequence resumed elsewhere from its tokens (``Sequence.resume_from``) or recomputed after preemption knows where
  its next check falls. Stop strings, EOS, stop token ids, the length limit and the repetition rule apply first: a
  token they end is not checked.
- **How.** A short fixed verification turn is appended, in the model's chat template, to a fork of the sequence: the
  assistant's turn is closed, a user turn asks whether the answer above fully answers the question, and the assistant's
  turn is opened. The fork shares the sequence's KV (engine/kv/fork.py: read, never written); one forward runs the
  newest token and the turn, for every sequence due in the step; the fork's KV is dropped at once. The check reads the
  probabilities of the template's yes and no answers (the first token of "Yes", "yes", " Yes", " yes" and of the same
  spellings of "No", a token both share left out) at the last position: P(yes) = p(yes) / (p(yes) + p(no)). At or
  above the threshold the sequence finishes after its newest token.
- **Where the wording comes from.** Asking a model for the probability that its own proposed answer is right is
  Kadavath et al., "Language Models (Mostly) Know What They Know" (2022, arXiv:2207.05221: P(True)); a model judging
  an answer from a fixed yes/no prompt is the LLM-as-a-judge setup of Zheng et al., "Judging LLM-as-a-Judge with
  MT-Bench and Chatbot Arena" (2023, arXiv:2306.05685). The sentence itself is ours (VERIFY_QUESTION).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdserve.engine.text.stop import FinishReason, StepResult

VERIFY_QUESTION = "Does your answer above fully answer my question? Reply with yes or no."
MARK = "\x00answer\x00"  # stands for the answer while the template renders the turn around it
YES_SPELLINGS = ("Yes", "yes", " Yes", " yes")
NO_SPELLINGS = ("No", "no", " No", " no")
SENTENCE_ENDS = ".!?。！？…\n"
CLOSERS = " \t\"')]}”’」』）"  # may follow a sentence end in the same token
PLAIN_TURN = f"\n\n{VERIFY_QUESTION}\nAnswer:"  # for a model without a chat template


def ends_sentence(delta: str) -> bool:
    """Whether a token whose text is ``delta`` ends a sentence."""
    stripped = delta.rstrip(CLOSERS)
    return bool(stripped) and stripped[-1] in SENTENCE_ENDS


@dataclass
class CompletionCheck:
    """One check, as its step reports it (both clocks price ``tokens`` new tokens after ``context`` cached ones)."""

    tokens: int
    context: int
    p_yes: float


@dataclass
class CompletionState:
    """One sequence's check schedule and what its checks cost."""

    threshold: float
    interval: int
    min_tokens: int
    last_due_at: int = 0  # output length at the last due check (0: none yet)
    due: bool = False  # a check is due after the newest token
    checks: int = 0
    check_tokens: int = 0
    last_p_yes: float | None = None

    def observe(self, generated: int, delta: str, finished: bool) -> None:
        """After each token (``generated`` tokens so far, ``delta`` its text; ``finished``: a stop rule ended the
        sequence on it, and then nothing is checked)."""
        self.due = (not finished and generated > max(1, self.min_tokens) and ends_sentence(delta)
                    and (not self.last_due_at or generated - self.last_due_at >= self.interval))
        if self.due:
            self.last_due_at = generated

    def passes(self, p_yes: float) -> bool:
        # the wire carries the threshold as float32: compare that value everywhere, so in-process equals disaggregated
        return p_yes >= float(np.float32(self.threshold))


class CompletenessJudge:
    """The verification turn of one model, and the check of every sequence due in a decode step."""

    def __init__(self, model, tokenizer) -> None:
        self.model = model
        self.context_length = model.config.context_length
        self.turn_ids = verification_turn(tokenizer)
        self.yes_ids, self.no_ids = answer_ids(tokenizer)

    def check(self, due: list[tuple[object, StepResult]]) -> None:
        """Check each (sequence, result of its newest token) in one forward; a complete one finishes now.

        The newest token's KV is not cached yet (the next decode step would feed it), so the fork runs it first.
        """
        runs = [(seq, result) for seq, result in due
                if seq.kv.length + 1 + len(self.turn_ids) <= self.context_length]
        if not runs:
            return
        tokens = [[seq.last_token, *self.turn_ids] for seq, _ in runs]
        contexts = [seq.kv.length for seq, _ in runs]
        logits = self.model.fork_forward([seq.kv for seq, _ in runs], tokens)
        for (seq, result), row, ids, context in zip(runs, logits, tokens, contexts):
            p = self.p_yes(row)
            state = seq.completion
            state.checks += 1
            state.check_tokens += len(ids)
            state.last_p_yes = p
            result.check = CompletionCheck(len(ids), context, p)
            if state.passes(p):
                seq.end(result, FinishReason.COMPLETE)

    def p_yes(self, logits: np.ndarray) -> float:
        yes = logits[self.yes_ids].astype(np.float64)
        no = logits[self.no_ids].astype(np.float64)
        peak = max(yes.max(), no.max())
        p_yes, p_no = np.exp(yes - peak).sum(), np.exp(no - peak).sum()
        return float(p_yes / (p_yes + p_no))


def verification_turn(tokenizer) -> list[int]:
    """The turn's token ids: what the chat template writes after an assistant answer, up to the next assistant turn's
    start, with VERIFY_QUESTION as the user's message."""
    if tokenizer.chat_template is None:
        return tokenizer.encode(PLAIN_TURN, add_bos=False)
    rendered = tokenizer.render_chat([{"role": "user", "content": "question"}, {"role": "assistant", "content": MARK},
                                      {"role": "user", "content": VERIFY_QUESTION}])
    if MARK not in rendered:
        raise ValueError("the chat template does not write the assistant's message")
    return tokenizer.encode(rendered.split(MARK, 1)[1], add_bos=False)


def answer_ids(tokenizer) -> tuple[list[int], list[int]]:
    """First tokens of the yes and of the no spellings; a token both start with says nothing and is left out."""
    yes = {tokenizer.encode(s, add_bos=False)[0] for s in YES_SPELLINGS}
    no = {tokenizer.encode(s, add_bos=False)[0] for s in NO_SPELLINGS}
    shared = yes & no
    if not yes - shared or not no - shared:
        raise ValueError("the tokenizer has no token that starts yes but not no (or the reverse)")
    return sorted(yes - shared), sorted(no - shared)
