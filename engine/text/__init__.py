"""Text in and out: tokenizer and chat template, sampling, stop rules, the completeness rule, logprobs."""
