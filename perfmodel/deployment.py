"""A modeled deployment (model, GPU, parallelism, software) and the checks that refuse what cannot run.

Services and ``pdserve perf`` call :func:`check_deployment` once at start-up and :func:`check_scenario` for a batch;
both raise ``ValueError`` naming the field (the services map it to INVALID_ARGUMENT, the CLI to a non-zero exit).
:func:`kv_capacity_tokens` is the KV budget a decode worker can take from the modeled deployment (``--kv-budget
modeled``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace

from pdserve.perfmodel.handoff import ENGINES, HandOff
from pdserve.perfmodel.hardware import GPU
from pdserve.perfmodel.hardware import gpu as gpu_by_name
from pdserve.perfmodel.hf_config import load_model_config
from pdserve.perfmodel.memory import MemoryFit, memory_fit
from pdserve.perfmodel.models import ModelProfile, model_profile
from pdserve.perfmodel.nics import node_nics
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.software import SOFTWARE
from pdserve.perfmodel.timing import TimingModel

KV_PRECISIONS = ("", "bf16", "fp8")  # "": the model's own


@dataclass
class Deployment:
    model: str = "deepseek-r1"
    hardware: str = "H20-141G"
    gpus: int = 8
    tp: int = 8
    ep: int = 8
    dp_attention: bool = False
    dp: int = 0  # data-parallel attention groups (SGLang's --dp-size; attention TP = tp / dp); 0: one per GPU
    software: str = "sglang"
    kv_precision: str = ""  # "" keeps the model's own (BF16 for DeepSeek); "fp8" halves the KV cache
    gpus_per_node: int = 8
    two_batch_overlap: bool = False
    mem_fraction: float = 0.0  # share of GPU memory for weights + KV (SGLang's --mem-fraction-static); 0: 0.90
    weight_precision: str = ""  # "" keeps the published checkpoint's (FP8 for DeepSeek, MXFP4 experts for GPT-OSS)
    model_config: str = ""  # a Hugging Face config.json to model instead of the named profile (--model-config)
    nics: int = 0  # RDMA NICs per 8-GPU server (0: the GPU's servers as published, perfmodel/nics.py)
    nic_gbps: float = 0.0  # line rate of one NIC in Gb/s (0: as published)
    transfer_engine: str = ""  # KV hand-off library: mooncake, nixl ("": the software's own: SGLang Mooncake, vLLM NIXL)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def profile(self) -> ModelProfile:
        if "profile" not in self._cache:
            m = load_model_config(self.model_config) if self.model_config else model_profile(self.model)
            m = m.with_weight_precision(self.weight_precision) if self.weight_precision else m
            self._cache["profile"] = m.with_kv_precision(self.kv_precision) if self.kv_precision else m
        return self._cache["profile"]

    def gpu(self) -> GPU:
        """The GPU profile with its servers' NICs (perfmodel/nics.py, or this deployment's nics / nic_gbps)."""
        g = gpu_by_name(self.hardware)
        n = node_nics(g.name, self.nics, self.nic_gbps)
        return replace(g, nics=n.nics, nic_bandwidth=n.nic_bandwidth)

    def parallel(self) -> ParallelConfig:
        return ParallelConfig(self.gpus, self.tp, self.ep, self.dp_attention, self.gpus_per_node,
                              self.two_batch_overlap, self.dp)

    def shape_label(self) -> str:
        """``8xH200 DP4-attn TP2 EP8``: one instance's GPUs, attention layout and expert parallelism."""
        return f"{self.gpus}x{self.hardware} {self.parallel().attention_label()} EP{self.ep}"

    def timing(self) -> TimingModel:
        if "timing" not in self._cache:
            self._cache["timing"] = TimingModel(self.profile(), self.gpu(), self.parallel(), self.software)
        return self._cache["timing"]

    def handoff(self, decode: "Deployment | None" = None) -> HandOff:
        """The KV hand-off from this (prefill) deployment to ``decode`` (default: the same deployment)."""
        return HandOff.between(self.timing(), (decode or self).timing(), self.transfer_engine)

    def memory(self) -> MemoryFit:
        return memory_fit(self.profile(), self.gpu(), self.parallel(), self.mem_fraction)


def check_deployment(d: Deployment) -> MemoryFit:
    """Raise ValueError (naming the field) unless the deployment can hold its weights; returns its memory fit."""
    for name in ("gpus", "tp", "ep", "gpus_per_node"):
        if getattr(d, name) <= 0:
            raise ValueError(f"{name}: must be positive, got {getattr(d, name)}")
    if not 0.0 <= d.mem_fraction < 1.0:
        raise ValueError(f"mem_fraction: must be in (0, 1) (0: the default), got {d.mem_fraction}")
    if d.software not in SOFTWARE:
        raise ValueError(f"software: unknown profile {d.software!r}; known: {', '.join(SOFTWARE)}")
    if d.transfer_engine and d.transfer_engine not in ENGINES:
        raise ValueError(f"transfer_engine: unknown {d.transfer_engine!r}; known: {', '.join(ENGINES)}")
    m, g, p = d.profile(), d.gpu(), d.parallel()  # unknown names and non-dividing tp/ep raise here
    if m.n_routed_experts and m.n_routed_experts % p.ep:
        raise ValueError(f"ep: {m.n_routed_experts} routed experts of {m.name} do not divide over ep={p.ep}")
    if m.n_heads % p.attention_shards:
        what = f"tp={p.tp}" if not p.dp_attention else f"the {p.attention_shards} GPUs of a DP attention group"
        raise ValueError(f"{'tp' if not p.dp_attention else 'dp'}: {m.n_heads} attention heads of {m.name} do not "
                         f"divide over {what}")
    fit = memory_fit(m, g, p, d.mem_fraction)
    if not fit.fits or fit.kv_tokens_per_replica <= 0:
        raise ValueError(
            f"gpus: weights of {m.name} need {fit.weight_bytes_per_gpu / 1e9:.1f} GB per GPU with {p.describe()}, "
            f"plus {fit.reserved_bytes_per_gpu / 1e9:.1f} GB reserved; {g.name} has {g.hbm_bytes / 1e9:.1f} GB usable: "
            "no room for the KV cache (use more GPUs, a larger GPU, or tensor-parallel attention)")
    return fit


def kv_capacity_tokens(d: Deployment) -> int:
    """KV tokens the whole modeled deployment holds: the budget of a decode worker that emulates it (``--kv-budget
    modeled``). With data-parallel attention this is the sum over the DP ranks, each holding
    ``d.memory().kv_tokens_per_replica`` for its share of the batch."""
    return check_deployment(d).max_kv_tokens


DEPLOYMENT_KEYS_HELP = ("model, hardware, gpus, tp, ep, dp_attention, dp, software, kv_precision, gpus_per_node, "
                        "two_batch_overlap, mem_fraction, weight_precision, model_config, nics, nic_gbps, transfer_engine")


def parse_deployment(text: str, base: Deployment | None = None, field_name: str = "deployment") -> Deployment:
    """``"hardware=H20-141G,gpus=8,tp=8,ep=8,dp_attention=1"`` over ``base`` (or the default deployment): the one
    spelling of a modeled deployment, on the workers, ``pdserve perf``, ``simulate`` and ``plan``."""
    values = {f.name: getattr(base or Deployment(), f.name) for f in fields(Deployment) if not f.name.startswith("_")}
    for item in filter(None, (x.strip() for x in (text or "").split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in values:
            raise ValueError(f"{field_name}: {item!r} is not KEY=VALUE with KEY one of {', '.join(values)}")
        kind = type(values[key])
        try:
            if kind is bool:
                if value.lower() not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
                    raise ValueError
                values[key] = value.lower() in ("1", "true", "on", "yes")
            else:
                values[key] = kind(value)
        except ValueError:
            raise ValueError(f"{field_name}: {key}={value!r} is not a {kind.__name__}") from None
    given = {item.partition("=")[0].strip().replace("-", "_") for item in (text or "").split(",")}
    if "hardware" in given and "gpus_per_node" not in given:
        # one NVLink domain is what "node" means to the communication model: 72 GPUs in a GB200 NVL72 rack
        values["gpus_per_node"] = max(values["gpus_per_node"], gpu_by_name(values["hardware"]).nvlink_domain)
    if "dp_attention" in given and not values["dp_attention"] and "dp" not in given:
        values["dp"] = 0  # dp_attention=0 over a base with groups: tensor-parallel attention
    if values["dp"] == 1:  # one group is tensor-parallel attention (SGLang turns DP attention off at --dp-size 1)
        values["dp"], values["dp_attention"] = 0, False
    elif values["dp"] > 1 and "dp_attention" not in given:
        values["dp_attention"] = True  # dp=N names DP attention groups, as SGLang's --dp-size with its flag
    if values["dp_attention"] and values["dp"] == values["tp"]:
        values["dp"] = 0  # a group per GPU: the same layout as dp_attention alone
    if "ep" not in given and values["ep"] > 1 and _dense(values):
        values["ep"] = 1  # a dense model has no experts to spread: expert parallelism is off unless asked
    return Deployment(**values)


def _dense(values: dict) -> bool:
    try:
        return not Deployment(**values).profile().n_routed_experts
    except (ValueError, OSError):
        return False  # an unknown name is refused, naming the field, where the deployment is checked


def add_deployment_flag(parser, flag: str = "--deployment", help: str = "") -> None:
    """The modeled deployment as one ``KEY=V,..`` flag over the default (deepseek-r1 on 8 x H20-141G, TP8 EP8); the
    main flag comes with ``--model-config PATH`` (the same as its model_config key)."""
    parser.add_argument(flag, default="", metavar="KEY=V,..",
                        help=help or f"modeled deployment over the default (deepseek-r1, 8 x H20-141G, TP8 EP8, "
                                     f"sglang); keys: {DEPLOYMENT_KEYS_HELP}; e.g. hardware=H200,dp_attention=1")
    if flag == "--deployment":
        parser.add_argument("--model-config", default="", metavar="PATH",
                            help="model the architecture of a Hugging Face config.json (file or its directory) "
                                 "instead of a named profile; what it cannot model is refused naming the field")


def deployment_text(args: object) -> str:
    """``--deployment`` with ``--model-config`` folded in as its model_config key (what workers are handed)."""
    text = getattr(args, "deployment", "") or ""
    path = getattr(args, "model_config", "") or ""
    if not path:
        return text
    if "," in path or "=" in path:
        raise ValueError(f"model_config: the path {path!r} must not contain ',' or '='")
    path = os.path.abspath(path)  # the workers a launcher starts resolve it alike
    return f"{text},model_config={path}" if text else f"model_config={path}"


def deployment_from_args(args: object) -> Deployment:
    """The deployment a command's ``--deployment`` (and ``--model-config``) flags describe (the default one without
    them)."""
    return parse_deployment(deployment_text(args))


def check_scenario(d: Deployment, prompt_lens: list[int] | None = None, decode_batch: int = 0,
                   context_len: int = 0) -> None:
    """Raise ValueError (naming the field) for sizes the deployment cannot serve."""
    fit = check_deployment(d)
    m = d.profile()
    prompt_lens = prompt_lens or []
    for n in prompt_lens:
        if n <= 0:
            raise ValueError(f"prefill_lens: every prompt length must be positive, got {n}")
        if m.max_context and n > m.max_context:
            raise ValueError(f"prefill_lens: {n} tokens exceed the context of {m.name} ({m.max_context:,})")
    if decode_batch < 0:
        raise ValueError(f"decode_batch: must be zero or positive, got {decode_batch}")
    if context_len < 0 or (decode_batch and context_len <= 0):
        raise ValueError(f"context_len: must be positive, got {context_len}")
    if m.max_context and context_len > m.max_context:
        raise ValueError(f"context_len: {context_len:,} exceeds the context of {m.name} ({m.max_context:,})")
    if sum(prompt_lens) > fit.max_kv_tokens:
        raise ValueError(f"prefill_lens: {sum(prompt_lens):,} prompt tokens exceed the KV capacity "
                         f"({fit.max_kv_tokens:,} tokens)")
    if decode_batch and decode_batch * context_len > fit.max_kv_tokens:
        raise ValueError(
            f"decode_batch: {decode_batch} x context {context_len:,} = {decode_batch * context_len:,} KV tokens exceed "
            f"the capacity of {d.hardware} x {d.gpus} ({fit.max_kv_tokens:,} tokens; at most "
            f"{fit.max_batch(context_len):,} sequences of {context_len:,})")
