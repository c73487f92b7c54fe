"""The forward pass keeps float32 end to end (a float64 slip makes every matmul ~10x slower)."""

import numpy as np

import pdserve.engine.model.llama as model_module


def test_forward_is_float32_everywhere(tiny_runtime, monkeypatch):
    seen = []

    def checked(fn):
        def wrapper(*args, **kwargs):
            for a in args:
                if isinstance(a, np.ndarray) and a.dtype.kind == "f":
                    seen.append(a.dtype)
            out = fn(*args, **kwargs)
            if out is not None:  # exp_nonpositive works in place
                seen.append(out.dtype)
            return out
        return wrapper

    for name in ("rms_norm", "silu_mul", "exp_nonpositive"):
        monkeypatch.setattr(model_module, name, checked(getattr(model_module, name)))
    model = tiny_runtime.model
    kv = model.new_kv()
    logits = model.prefill([kv], [[5, 6, 7, 8]])
    logits2 = model.decode_step([kv], [9])
    assert seen and set(seen) == {np.dtype(np.float32)}
    assert logits.dtype == logits2.dtype == kv.k.dtype == np.float32
    w = model.weights
    assert all(a.dtype == np.float32 for lw in w.layers for a in vars(lw).values())
