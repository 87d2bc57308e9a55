"""The typed schema of a run. Every knob is a field here, with one line saying what it does.

YAML in `conf/` only picks values; Hydra merges it onto these dataclasses in struct mode, so an
unknown key (`trainer.loss.teacher_ta=1`) or a wrong type is an error, never a silent new key.
"""

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Annotated, Any

from annotated_types import Ge, Gt, Interval

# A knob's own range, on its field: config/ranges.py checks every field against it, docs/parameters.md shows it.
Count = Annotated[int, Ge(1)]  # 1, 2, ...
NonNegInt = Annotated[int, Ge(0)]  # 0, 1, ... (0 often means off or auto)
NonNeg = Annotated[float, Ge(0)]  # >= 0
Positive = Annotated[float, Gt(0)]  # > 0
Share = Annotated[float, Interval(gt=0, le=1)]  # (0, 1]
Fraction = Annotated[float, Interval(ge=0, lt=1)]  # [0, 1)
Unit = Annotated[float, Interval(ge=0, le=1)]  # [0, 1]
Port = Annotated[int, Interval(ge=0, le=65535)]  # a TCP port (0: the kernel picks one)
TopLogprobs = Annotated[int, Interval(ge=1, le=20)]  # a chat request's top_logprobs: vLLM's default cap and OpenAI's
# vLLM's --max-lora-rank choices (MaxLoRARanks in vllm/config/lora.py; tests/test_vllm_args.py keeps them in step):
# written here because the launcher plans without importing vLLM
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
LoraRank = Annotated[int, Interval(ge=1, le=max(VLLM_LORA_RANKS))]  # an adapter vLLM can serve
# vLLM's API server's --max-num-seqs on GPUs of 70 GB and more (256 below; get_batch_defaults in
# vllm/engine/arg_utils.py, tests/test_vllm_args.py keeps it in step): a smaller --max-num-batched-tokens is refused
VLLM_MAX_NUM_SEQS = 1024
SCORER_TERM = "scorer_term"  # a field's metadata: a knob of the scorer's term (trainer.loss's, scorer_knobs)


def scorer_knob(default):
    """A field of trainer.loss that shapes the scorer's term: it applies only where a mode scores the student's
    tokens, and a run none of whose modes does refuses a value other than its default."""
    return field(default=default, metadata={SCORER_TERM: True})


class TeacherKind(str, Enum):
    none = "none"  # no teacher (rl)
    local_vllm = "local_vllm"  # the launcher starts a vLLM server for teacher.model
    external = "external"  # any OpenAI-compatible endpoint at teacher.base_url


class ComputeDtype(str, Enum):
    auto = "auto"  # bfloat16 on GPU; on CPU resolved per job (docs/off_policy.md)
    float32 = "float32"  # full precision
    bfloat16 = "bfloat16"  # half the memory of the activations; the weights stay float32 (master weights)


class TinyArchitecture(str, Enum):
    qwen2 = "qwen2"  # Qwen2: untied by default, no q/k norm
    qwen3 = "qwen3"  # Qwen3: q/k norm


class TinyTokenizer(str, Enum):
    char = "char"  # one token per byte
    bpe = "bpe"  # byte-level BPE trained on the task's chat text


class LrSchedule(str, Enum):
    constant = "constant"  # the peak lr after warmup until the last step
    cosine = "cosine"  # cosine decay from the peak after warmup to 0 at max_steps


class RatioLevel(str, Enum):
    token = "token"  # each token's pi/mu, masked outside trainer.loss's bands
    sequence = "sequence"  # GSPO: each sample's length-normalised ratio exp(mean log pi/mu), clipped


class WeightLevel(str, Enum):
    token = "token"  # each token's importance weight pi/mu
    sequence = "sequence"  # each sample's: the geometric mean of its tokens' pi/mu, exp(mean log pi/mu)


class ReferenceSource(str, Enum):
    trainer = "trainer"  # a frozen copy of the starting weights in the trainer (LoRA: the base, adapter off)
    vllm = "vllm"  # a vLLM server of the starting weights scores every sample (prompt logprobs), as opd's teacher


class DistillSignal(str, Enum):
    sampled = "sampled"  # log p_T of the token the student sampled, as a per-token advantage
    topk = "topk"  # the KL over the teacher's top-k tokens at each position plus one tail bucket, as a loss


class KlDirection(str, Enum):
    reverse = "reverse"  # KL(student || teacher): mode-seeking
    forward = "forward"  # KL(teacher || student): mass-covering
    jsd = "jsd"  # generalized Jensen-Shannon (GKD's), weight distill_beta: 0 = forward, 1 = reverse, between bounded
    skew_forward = "skew_forward"  # KL(teacher || a mix of distill_beta teacher and the rest student)
    skew_reverse = "skew_reverse"  # KL(student || a mix of distill_beta student and the rest teacher)


class TokenLimitField(str, Enum):
    auto = "auto"  # learned by the probe before the first step
    max_tokens = "max_tokens"  # vLLM, most compatible servers, Anthropic
    max_completion_tokens = "max_completion_tokens"  # OpenAI (its reasoning models accept only this one)


class ReasoningMode(str, Enum):
    drop = "drop"  # train on the final answer only
    keep = "keep"  # train on the reasoning too, as <think>\n…\n</think>\n\n before the answer


class TeacherAlignment(str, Enum):
    auto = "auto"  # tokens where the teacher's tokenizer is the student's, else text (the launcher resolves it)
    tokens = "tokens"  # the teacher scores the student's own tokens: its tokenizer must be the student's
    text = "text"  # the teacher scores the student's text in its own tokens, compared chunk by chunk


class Layout(str, Enum):
    auto = "auto"  # colocated on a CPU of one node with one trainer process (measured faster), else separate
    separate = "separate"  # every role on its own share of the devices (cores or GPUs), working at once
    colocated = "colocated"  # every role on the same device (the CPU or one GPU), taking turns at step boundaries


class WeightTransfer(str, Enum):
    files = "files"  # the trainer writes safetensors (or the adapter) to the run dir, the server reloads them
    nccl = "nccl"  # vLLM's NCCL weight transfer, trainer GPU to server GPUs (separate GPUs, full weights; opt-in)
    gloo = "gloo"  # the same push over TCP between CPU processes (the CPU build's counterpart of nccl)


class WandbMode(str, Enum):
    auto = "auto"  # $WANDB_MODE if set; else online when WANDB_API_KEY is set, offline otherwise
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class TinyModelConfig:
    architecture: TinyArchitecture = TinyArchitecture.qwen2  # qwen2 | qwen3 (q/k norm, as Qwen3 models)
    tokenizer: TinyTokenizer = TinyTokenizer.char  # char (one token per byte) | bpe (trained on the task's chat text)
    tie_embeddings: bool = False  # the output layer shares the input embedding (as small Qwen and Llama models)
    hidden_size: Count = 128  # model width
    num_layers: Count = 2  # transformer blocks
    num_heads: Count = 4  # attention heads (head_dim = hidden/heads must be >= 32 for vLLM's CPU backend)
    num_kv_heads: Count = 2  # grouped-query KV heads
    intermediate_size: Count = 256  # MLP width
    vocab_size: int = 320  # char: the byte vocab padded to this size; bpe: the trained vocab's size
    init_seed: int = 0  # seed of the random init


@dataclass
class WarmStartConfig:
    steps: NonNegInt = 80  # SFT steps on the task's train split before anything else (0 = random init)
    batch_size: Count = 64  # examples per SFT step
    lr: float = 1e-3  # peak learning rate
    warmup_steps: NonNegInt = 20  # linear warmup steps
    schedule: LrSchedule = LrSchedule.constant  # lr after warmup: constant | cosine (to 0 at the last step)
    seed: int = 0  # data order seed
    task: str | None = None  # a built-in task (reverse, sort, lookup) to learn instead of the run's (episodes')
    context_steps: NonNegInt = 0  # steps first on prompts shown another's answer in a system message: reads context
    context_share: Fraction = 0.0  # of the `steps`' examples, the share shown another's answer so (keeps the reading)


@dataclass
class ModelConfig:
    name: str = "tiny"  # "tiny" (built-in, built locally), a local Hugging Face model dir, or a Hub id (org/name)
    revision: str | None = None  # Hub ids: branch, tag or commit (None: main)
    path: str | None = None  # set by the launcher: the local snapshot a Hub id resolved to, which every process loads
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)  # architecture of the built-in model
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)  # SFT that turns the tiny model into a student
    cache_dir: str | None = None  # cache of built models, keyed by recipe (None: $PRIME_RL_CACHE or ~/.cache/prime_rl)
    chat_template_args: dict[str, Any] = field(default_factory=dict)  # chat template variables, e.g. enable_thinking


@dataclass
class TaskSourceConfig:
    name: str = "reverse"  # reverse, sort (built-in) | hf | jsonl (hf, a file) | reasoning_gym | verifiers | gym
    path: str | None = None  # hf, jsonl: a data dir, a .json/.jsonl/.csv/.parquet file, or a Hub dataset id
    subset: str | None = None  # hf: the dataset's configuration, e.g. main for openai/gsm8k (None: its only one)
    split: str = "train"  # hf: the split trained on
    eval_split: str | None = None  # hf: the split evaluated on (None: the last num_eval rows of `split`, held out)
    eval_path: str | None = None  # hf, jsonl: eval rows from another file or dataset (its eval_split, else `split`)
    prompt_key: str = "prompt"  # hf: the column holding the user message
    answer_key: str = "answer"  # hf: the column holding the reference answer
    system_prompt: str | None = None  # a system message before every prompt (None: the chat template's default)
    verifier: str = "similarity"  # similarity | exact | contains | math | <module>:<function> | judge (a model)
    dataset: str | None = None  # reasoning_gym: the dataset's name, e.g. spell_backward
    env: str | None = None  # verifiers: the taskset id (a module exporting a Taskset); gym: <module>:<factory>
    max_turns: int = 4  # gym, verifiers episodes: an episode's turns at most (or fewer, as the environment says)
    env_timeout_s: float = 10.0  # gym, verifiers episodes: one call's limit (reset, step, tool); over it, reward 0
    tool_parser: str = "hermes"  # gym, verifiers with tools: the vLLM tool parser that reads a reply's calls
    options: dict[str, Any] = field(default_factory=dict)  # per kind (built-in: min_len, max_len; gym: factory kwargs)
    num_train: int = 20000  # built-in, reasoning_gym, verifiers: size of the train split
    num_eval: int = 128  # size of the eval split
    seed: int = 0  # examples' seed (built-in: eval is one list's tail; reasoning_gym: eval seed+1; verifiers: shuffle)
    weight: float = 1.0  # in task.mix: this source's share of each step's prompts
    label: str | None = None  # in task.mix: its metrics' name, reward/<label> (None: dataset, taskset, file, task)
    mode: str | None = None  # in task.mix: the mode its prompts train with, a name or <module>:<Mode> (None: the run's)
    adv_tau: NonNeg | None = None  # in task.mix: its samples' trainer.loss.adv_tau (None: the run's)
    teacher_tau: NonNeg | None = None  # in task.mix: its scored samples' trainer.loss.teacher_tau (None: the run's)
    teacher: str | None = None  # in task.mix: the name of the `teachers` entry that teaches it (None: `teacher`)
    rollouts_per_example: Count | None = None  # in task.mix: samples of each of its prompts (None: the orchestrator's)
    on_policy: Unit | None = None  # in task.mix: its prompts' share the student samples (opd; None: modes.opd's)


MIX = "mix"  # the task name that trains on several sources (task.mix)
EPISODIC = ("gym", "verifiers")  # the task kinds whose sources may be episodes with tools (task.tool_parser)


@dataclass
class TaskConfig(TaskSourceConfig):
    mix: list[TaskSourceConfig] = field(default_factory=list)  # task=mix: the sources trained on together


@dataclass
class SamplingConfig:
    temperature: NonNeg = 1.0  # rollout sampling temperature
    top_p: Share = 1.0  # nucleus sampling
    max_tokens: int = 16  # completion length cap


@dataclass
class VerificationConfig:
    enabled: bool = True  # compute rewards with the verifier; on in rl; in opd off only with trainer.loss.adv_tau=0
    workers: Count = 2  # verifier processes: rewards are computed off the orchestrator's event loop
    timeout_s: Positive = 10.0  # a reward call's limit: a slower or hanging verifier gives reward 0 (verifier/timeouts)


@dataclass
class EvalTaskConfig(TaskConfig):
    interval: NonNegInt | None = None  # evaluate it every N steps (None: orchestrator.eval.interval); 0 = never
    num_examples: Count | None = None  # its eval prompts (None: orchestrator.eval.num_examples)
    samples_per_prompt: Count | None = None  # its k (None: orchestrator.eval.samples_per_prompt)
    temperature: NonNeg | None = None  # its sampling temperature (None: orchestrator.eval.temperature)


@dataclass
class EvalConfig:
    interval: NonNegInt = 10  # evaluate every N steps (and at the first and last step); 0 = never
    num_examples: Count = 128  # eval prompts (from the task's eval split)
    temperature: NonNeg = 1.0  # eval sampling temperature (0 = greedy)
    samples_per_prompt: Count = 1  # k samples per eval prompt: eval/avg@k and eval/pass@j for j = 1, 2, 4, …, k
    tasks: list[EvalTaskConfig] = field(default_factory=list)  # more tasks' eval splits, metrics eval/<label>/…


@dataclass
class DynamicSamplingConfig:
    enabled: bool = False  # rl: drop groups whose rewards are all equal (no advantage) and refill with new prompts
    max_refills: NonNegInt = 3  # rounds of new prompts a step may sample to refill its batch (then uniform groups)


@dataclass
class DifficultyConfig:
    enabled: bool = False  # skip for a while the prompts whose last group's pass rate fell outside the band
    min_pass_rate: float = 0.0  # a prompt whose pass rate is at or below this is too hard (< 0: none is)
    max_pass_rate: float = 1.0  # a prompt whose pass rate is at or above this is too easy (> 1: none is)
    pass_reward: float = 1.0  # a sample passes when its reward is at least this (1.0: exact)
    skip_steps: Count = 50  # steps a prompt outside the band is not drawn, counted from the step that judged it


@dataclass
class LengthConfig:
    overlong_buffer: NonNegInt = 0  # DAPO's soft overlong penalty over the last N tokens before max_tokens (0 = off)
    overlong_penalty: NonNeg = 1.0  # what a reply of max_tokens tokens loses of its reward (linear over the buffer)
    mask_truncated: bool = False  # replies cut by max_tokens train on none of their tokens (DAPO's overlong filter)


@dataclass
class OrchestratorConfig:
    batch_size: int = 128  # rollouts per step (= prompts x rollouts_per_example)
    rollouts_per_example: Count = 8  # rollouts per prompt (GRPO group size)
    max_async_level: NonNegInt = 1  # rollouts of step n may come from a policy at most this many steps old
    std_normalize: bool = True  # divide GRPO advantages by the group's reward std (GRPO); false = mean-centred only
    tie_std: NonNeg = 1e-3  # a group of rewards whose std is at most this is tied: advantages 0 (a judge's noise)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # rollout sampling
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)  # DAPO's, with refill
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)  # an online difficulty filter of prompts
    length: LengthConfig = field(default_factory=LengthConfig)  # length shaping of single-turn replies (rl, opd)
    verification: VerificationConfig = field(default_factory=VerificationConfig)  # reward computation
    eval: EvalConfig = field(default_factory=EvalConfig)  # periodic evaluation
    requests_per_step: Count = 8  # concurrent requests a step's rollouts (and opd's teacher scoring) are split into
    request_timeout_s: NonNeg = 0.0  # per request to a student server; 0 = auto: 120 s + max_tokens / 10 tokens/s
    max_retries: NonNegInt = 3  # retries (with backoff) of a failed request (each request alone) before the run fails
    log_samples: NonNegInt = 2  # each step's first N samples (text, ids, reward, teacher logprobs…) to samples.jsonl


@dataclass
class CorrectionConfig:
    """Off-policy correction between the trainer's policy pi and the sampler's mu (docs/off_policy.md); the
    `correction` group's presets set it: band (default), none, token_tis, seq_tis, icepop, seq_mask_tis."""

    prob_band: Fraction = 0.2  # drop tokens whose |pi - mu| (probabilities) exceeds this; 0 = no band
    mask_level: WeightLevel = WeightLevel.token  # MIS: the weight the bounds below drop by: token | sequence
    mask_low: NonNeg = 0.5  # MIS: drop what the weight puts below this (0 = no lower bound)
    mask_high: NonNeg = 5.0  # MIS: drop what the weight puts above this (0 = no upper bound)
    truncate_level: WeightLevel = WeightLevel.token  # TIS: the weight truncated: token | sequence
    truncate_at: NonNeg = 0.0  # TIS: the policy term's weight is min(w, this), scaled down where w exceeds it; 0 = off


@dataclass
class LossConfig:
    adv_tau: NonNeg = 1.0  # weight of the reward advantage; 0 = pure distillation
    teacher_tau: NonNeg = scorer_knob(0.0)  # weight of the per-token distillation term log p_T - log pi (> 0 to distil)
    kl_tau: NonNeg = 0.0  # weight of the (log ratio)^2 penalty against the inference policy
    kl_ref_tau: NonNeg = 0.0  # weight of the KL to the frozen starting policy (k3 estimator, over the trained tokens)
    kl_ref_from: ReferenceSource = ReferenceSource.trainer  # where the reference's logprobs come from: trainer | vllm
    entropy_tau: NonNeg = 0.0  # weight of an entropy bonus: minus this times the mean entropy of the trained tokens
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)  # off-policy correction (correction=)
    ratio_level: RatioLevel = RatioLevel.token  # importance ratio: token | sequence (GSPO; the token masks still apply)
    seq_clip_low: Fraction = 3e-4  # sequence level: clip each sample's ratio at 1 - this (GSPO's value)
    seq_clip_high: NonNeg = 4e-4  # sequence level: clip each sample's ratio at 1 + this (GSPO's value)
    teacher_adv_clip: float = scorer_knob(2.0)  # clamp the per-token distillation advantage to +-this (0 = no clamp)
    teacher_adv_center: bool = scorer_knob(True)  # subtract the batch mean of the distillation advantage
    distill: DistillSignal = scorer_knob(DistillSignal.sampled)  # the scorer's signal: sampled (one token) | topk
    distill_top_k: Count = scorer_knob(32)  # distill=topk: scorer logprobs per position (the vocabulary: the exact KL)
    distill_kl: KlDirection = scorer_knob(KlDirection.reverse)  # distill=topk: reverse | forward | jsd | skew_*
    distill_beta: Unit = scorer_knob(0.5)  # distill_kl=jsd: its beta; skew_forward, skew_reverse: the skew (0: the KL)


def scorer_knobs() -> list[str]:
    """The fields of trainer.loss that shape the scorer's term (scorer_knob)."""
    return [f.name for f in fields(LossConfig) if f.metadata.get(SCORER_TERM)]


@dataclass
class OptimConfig:
    lr: NonNeg = 3e-4  # AdamW peak learning rate
    beta1: Fraction = 0.9  # AdamW beta1
    beta2: Fraction = 0.98  # AdamW beta2
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_steps: NonNegInt = 10  # linear lr warmup
    schedule: LrSchedule = LrSchedule.constant  # lr after warmup: constant | cosine (to 0 at max_steps)
    max_grad_norm: Positive = 1.0  # gradient clipping


@dataclass
class LoraConfig:
    enabled: bool = False  # train a peft LoRA adapter instead of all weights
    rank: LoraRank = 8  # adapter rank (vLLM's --max-lora-rank is the smallest it allows at or above this)
    alpha: Count = 16  # LoRA scaling numerator
    dropout: float = 0.0  # dropout on the adapter input (sft only: rl and opd must train the policy vLLM samples)
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )  # module names that get adapters
    name: str = "student-lora"  # adapter name served by vLLM and used for rollouts (not the base model's "student")


@dataclass
class TrainerConfig:
    loss: LossConfig = field(default_factory=LossConfig)  # loss and advantage shaping
    optim: OptimConfig = field(default_factory=OptimConfig)  # optimizer
    lora: LoraConfig = field(default_factory=LoraConfig)  # set by the lora group
    micro_batch_size: NonNegInt = 0  # rows per forward/backward; 0 = auto: 64 samples' tokens, fewer if logits whole
    pack_tokens: NonNegInt = 0  # sequence packing: samples share rows of up to this many tokens; 0 = a sample per row
    dtype: ComputeDtype = ComputeDtype.auto  # compute: auto | float32 | bfloat16; the weights stay float32
    activation_checkpointing: bool = False  # recompute layer activations in the backward pass: less memory, more time
    device: str = "auto"  # auto (cuda when visible) | cpu | cuda
    num_threads: NonNegInt = 0  # torch CPU threads; 0 = auto: every core colocated, cores / GPUs on GPUs, else 1
    num_procs: Count = 1  # trainer processes on CPU (gloo); on GPUs one per deployment.num_train_gpus
    collective_timeout_s: NonNeg = 0.0  # NCCL/gloo timeout; 0 = auto: 30 min + rank 0 writing fp32 weights at 100 MB/s


@dataclass
class InferenceConfig:
    host: str = "127.0.0.1"  # bind address of the vLLM servers
    port: Port = 0  # student server port; 0 = one the kernel picks when the server binds (no races)
    dtype: str = "auto"  # vLLM --dtype; auto = bfloat16 on GPU, on CPU as trainer.dtype's auto (docs/off_policy.md)
    max_model_len: int = 512  # vLLM --max-model-len (opd: the student server one less, so the teacher can score)
    kv_cache_bytes: Count = 67108864  # CPU: vLLM --kv-cache-memory-bytes
    gpu_memory_utilization: Share = 0.9  # GPU: vLLM --gpu-memory-utilization
    max_num_batched_tokens: NonNegInt = 0  # GPU, opsd (it scores its own tokens): tokens per forward; 0 = auto
    enforce_eager: bool | None = None  # vLLM --enforce-eager (no CUDA graphs); None = auto: on CPU, not on GPU
    tp: Count = 1  # GPU: vLLM --tensor-parallel-size of the student server (tp * dp = deployment.num_infer_gpus)
    dp: Count = 1  # GPU: vLLM --data-parallel-size of the student server (replicas, each over tp GPUs)
    extra_args: list[str] = field(default_factory=list)  # more vLLM CLI arguments of the student server, as given
    weight_transfer: WeightTransfer = WeightTransfer.files  # files | nccl | gloo: how each step's weights reach it
    urls: list[str] = field(default_factory=list)  # student server URLs, from the multi-node plan (empty: this node's)
    url: str | None = None  # a student server already serving (…/v1, `python -m prime_rl.serve`): used, not started
    api_key_env: str = "VLLM_API_KEY"  # inference.url: the env var holding that server's key (never the key itself)


@dataclass
class TeacherApiConfig:
    token_limit_field: TokenLimitField = TokenLimitField.auto  # auto | max_tokens | max_completion_tokens
    multiple_choices: bool | None = None  # n > 1 in one request; false: one request per sample (None: probe)
    sampling_params: bool | None = None  # temperature/top_p are sent; false: endpoint defaults, 1 (None: probe)


@dataclass
class TeacherConfig:
    kind: TeacherKind = TeacherKind.none  # none | local_vllm | external: the teacher group (opd, sft: local_vllm)
    model: str = ""  # local_vllm: "tiny" (built-in, trained longer), a model dir or a Hub id; external: the API's model
    revision: str | None = None  # local_vllm with a Hub id: branch, tag or commit (None: main)
    path: str | None = None  # set by the launcher: the local snapshot a Hub id resolved to
    warm_start: WarmStartConfig = field(
        default_factory=lambda: WarmStartConfig(steps=500, lr=3e-3, schedule=LrSchedule.cosine)
    )  # recipe of the built-in tiny teacher
    base_url: str | None = None  # external: OpenAI-compatible base URL (…/v1); local_vllm: set by the multi-node plan
    api_key_env: str | None = None  # name of the env var holding the API key (the key never enters the config)
    headers: dict[str, str] = field(default_factory=dict)  # extra HTTP headers (no secrets: use header_envs)
    header_envs: dict[str, str] = field(default_factory=dict)  # header name -> env var holding its (secret) value
    port: Port = 0  # local_vllm: teacher server port; 0 = one the kernel picks when the server binds
    gpu_memory_utilization: Share | None = None  # local_vllm on a GPU: its server's share (None: inference's)
    max_num_batched_tokens: NonNegInt = 0  # local_vllm on a GPU: tokens per forward; 0 = auto: ~2 GiB of prompt logits
    extra_args: list[str] = field(default_factory=list)  # local_vllm: more vLLM CLI arguments of its server
    alignment: TeacherAlignment = TeacherAlignment.auto  # opd: auto | tokens | text (docs/cross_tokenizer.md)
    tokenizer: str | None = None  # opd, external, another tokenizer: a model dir or Hub id with the teacher's tokenizer
    max_retries: NonNegInt = 5  # retries (with backoff and jitter) of a failed teacher request
    request_timeout_s: NonNeg = 0.0  # per teacher request; 0 = auto: 120 s + its max_tokens / 10 tokens/s
    max_concurrency: Count = 32  # teacher requests in flight at once
    rate_limit_wait_s: NonNeg = 600.0  # longest a request waits out 429/Retry-After answers in all, then fails
    api: TeacherApiConfig = field(default_factory=TeacherApiConfig)  # what the chat endpoint accepts
    extra_body: dict[str, Any] = field(default_factory=dict)  # provider fields added to each chat request (no secrets)
    reasoning: ReasoningMode = ReasoningMode.drop  # sft: drop | keep the teacher's reasoning in what the student learns
    max_tokens: Count | None = None  # length cap of the teacher's chat answers, thinking included (None: sampling's)
    price_per_mtok_in: float = 0.0  # USD per million prompt tokens (with _out: logs teacher/cost_usd)
    price_per_mtok_out: float = 0.0  # USD per million completion tokens, reasoning tokens included
    cache_dir: str | None = None  # its answers and its scores of token sequences, reused across runs (None: none)
    cache_max_gib: NonNeg = 0.0  # bound of the scores in cache_dir: the least recently read go first (0: none)
    system_prompt: str | None = None  # opd, sft: a system message only it is shown, {answer}: the reference answer


class Verdict(str, Enum):
    yes_no = "yes_no"  # P(yes) / (P(yes) + P(no)) among the first token's top logprobs of the judge's reply
    score = "score"  # the first number of its reply on [0, judge.scale] (a "7/10" on its own scale), divided out
    reward_model = "reward_model"  # a sequence classifier's probability of its last class (one label: sigmoid)


# a judge's default rubric: the reply against the reference answer
JUDGE_RUBRIC = "Question: {prompt}\nReference: {answer}\nReply: {completion}\nIs the reply right? Answer yes or no."


@dataclass
class JudgeConfig:
    """A model that gives rewards (docs/how-to/judge.md): the sources with task.verifier=judge are scored by the
    server of one of the run's teachers, a chat model reading `rubric` or a reward model."""

    teacher: str | None = None  # the `teachers` entry whose server judges (None: the run's `teacher`, e.g. opd's)
    verdict: Verdict = Verdict.yes_no  # yes_no | score | reward_model: how its answer becomes a reward in [0, 1]
    rubric: str = JUDGE_RUBRIC  # yes_no, score: its user message, {prompt} {completion} {answer} filled in
    scale: Positive = 10.0  # score: the top of the scale the rubric asks for
    max_tokens: Count = 64  # score: the length cap of its reply, reasoning included
    top_logprobs: TopLogprobs = 20  # yes_no: the first token's alternatives searched for yes and no


@dataclass
class DeploymentConfig:
    layout: Layout = Layout.auto  # auto | separate | colocated (one device shared in turns; docs/concepts/layouts.md)
    num_infer_gpus: NonNegInt = 0  # GPUs of the student vLLM server (per inference node when multi-node); 0 = CPU
    num_train_gpus: NonNegInt = 0  # GPUs of the trainer (per trainer node when multi-node); 0 = CPU
    num_teacher_gpus: NonNegInt | None = None  # GPUs of the local teachers' vLLM servers, split evenly; None = no GPUs
    num_infer_nodes: NonNegInt = 0  # multi-node SLURM job: nodes with a student server each (0 = one node for all)
    num_train_nodes: NonNegInt = 0  # multi-node SLURM job: trainer nodes after the inference nodes (0 = one node)
    gpu_headroom_gib: NonNeg = 0.0  # GPU memory the fit checks leave per GPU beside the roles; 0 = auto: per process


# what one node of a GPU job asks SLURM for besides its GPUs (conf/hydra/launcher/slurm_gpu.yaml)
CPUS_PER_GPU, MIN_NODE_CPUS = 8, 16
MEM_GB_PER_GPU, MIN_NODE_MEM_GB = 64, 128


def node_cpus(d) -> int:
    """CPUs one node of a GPU job asks SLURM for: CPUS_PER_GPU per GPU it uses, at least MIN_NODE_CPUS."""
    return max(MIN_NODE_CPUS, CPUS_PER_GPU * node_gpus(d))


def node_mem_gb(d) -> int:
    """Host memory one node of a GPU job asks SLURM for: trainer rank 0 reads the model in float32 into the CPU's
    memory before sending each rank its shards, and gathers each export there."""
    return max(MIN_NODE_MEM_GB, MEM_GB_PER_GPU * node_gpus(d))


def num_nodes(d) -> int:
    """Nodes of one job: 1, or inference + trainer nodes when multi-node."""
    return d.num_infer_nodes + d.num_train_nodes or 1


def node_gpus(d) -> int:
    """GPUs one node of the job uses. Multi-node: the GPU counts are per node, and the local teacher shares
    the last inference node with a student server. Colocated: every role on the same GPUs."""
    if d.layout == Layout.colocated:
        return d.num_infer_gpus
    teacher = d.num_teacher_gpus or 0
    if num_nodes(d) == 1:
        return d.num_infer_gpus + d.num_train_gpus + teacher
    return max(d.num_infer_gpus + teacher, d.num_train_gpus)


@dataclass
class WandbConfig:
    mode: WandbMode = WandbMode.auto  # auto | online | offline | disabled
    project: str = "prime-rl"  # W&B project
    entity: str | None = None  # W&B entity (team or user)
    name: str | None = None  # run name (None: W&B picks one; multirun: the job's override string)
    group: str | None = None  # run group (None in a multirun: the sweep dir, e.g. 2026-01-31/12-00-00)
    tags: list[str] = field(default_factory=list)  # extra tags (mode, teacher and lora are always added)


@dataclass
class MonitorConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)  # Weights & Biases
    samples_interval: NonNegInt = 10  # log a table of rollout samples every N steps; 0 = never
    num_samples: NonNegInt = 16  # rollouts per samples table: the batch's first, so whole groups of one prompt


@dataclass
class CkptConfig:
    interval: NonNegInt = 50  # checkpoint trainer + orchestrator every N steps; 0 = only at the end
    resume: bool = False  # continue from the latest checkpoint in the run dir
    keep: Count = 2  # checkpoints kept on disk (oldest deleted first)


@dataclass
class LauncherConfig:
    dry_run: bool = False  # print the process plan, write configs/, start nothing
    prepare_only: bool = False  # build (SFT warm-start) the student and local teacher, print their dirs, start nothing
    ready_timeout_s: NonNeg = 0.0  # give up on a server not ready by then; 0 = auto: 300 s + weights at 100 MB/s
    stop_grace_s: NonNeg = 5.0  # between SIGTERM and SIGKILL of a process group
    restarts: NonNegInt = 2  # a run whose role crashed after a step restarts from its latest checkpoint this often
    server_restarts: NonNegInt = 3  # a server of the run that dies or hangs is restarted in place this often (each)
    server_hang_s: NonNeg = 120.0  # a server whose /health goes unanswered this long is hung (restarted); 0 = never
    tcmalloc: bool = True  # preload the system's libtcmalloc_minimal (if installed) into every process without a GPU
    weights_dir: str | None = None  # where weight exports go (linked from the run dir); None = auto: GPU node scratch


@dataclass
class Config:
    training_mode: str = "rl"  # rl | opd | sft | opsd (the training_mode group), or <module>:<Mode> (docs/modes.md)
    modes: dict[str, Any] = field(default_factory=dict)  # each mode's own knobs, by its name (modes.opsd.context)
    max_steps: Count = 250  # optimizer steps
    step_timeout_s: Positive = 3600.0  # longest wait for a step: the trainer for a batch, the orchestrator for weights
    seed: int = 0  # seed of sampling order, rollouts and training
    run_dir: str | None = None  # set by the launcher to the Hydra run dir
    model: ModelConfig = field(default_factory=ModelConfig)  # the student
    task: TaskConfig = field(default_factory=TaskConfig)  # data and verifier
    orchestrator: OrchestratorConfig = field(default_factory=OrchestratorConfig)  # rollouts, rewards, advantages
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # loss, optimizer, LoRA
    inference: InferenceConfig = field(default_factory=InferenceConfig)  # vLLM servers
    teacher: TeacherConfig = field(default_factory=TeacherConfig)  # opd / sft teacher
    teachers: dict[str, TeacherConfig] = field(default_factory=dict)  # named teachers, for the mix sources naming one
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the model scoring the sources with verifier=judge
    deployment: DeploymentConfig = field(default_factory=DeploymentConfig)  # GPU split
    monitor: MonitorConfig = field(default_factory=MonitorConfig)  # W&B, samples
    ckpt: CkptConfig = field(default_factory=CkptConfig)  # checkpoints and resume
    launcher: LauncherConfig = field(default_factory=LauncherConfig)  # process supervision
