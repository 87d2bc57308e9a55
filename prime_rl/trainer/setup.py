"""The trainer's state, set up once for its loop (trainer/train.py), devstep and supervised fine-tuning
(trainer/supervised.py): the model (float32 master weights, LoRA's adapter; sharded under torchrun), AdamW and its
schedule, the fused output layer where it is plain, the run's Objective, the frozen reference where kl_ref_tau > 0;
for a run, its resumed checkpoint, its weights as the student server gets them, and its turn on the device."""

import functools
from dataclasses import dataclass

import torch
from transformers.utils.logging import disable_progress_bar

from prime_rl.config.layout import is_colocated, on_gpu, server_dtype, trainer_threads
from prime_rl.config.schema import Config
from prime_rl.models.chat import padding_id
from prime_rl.protocol.device_turn import DeviceTurn
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import load_checkpoint
from prime_rl.trainer.distributed import SINGLE, World, init_world, load_sharded_model
from prime_rl.trainer.loss import Objective
from prime_rl.trainer.lr_schedule import lr_factor
from prime_rl.trainer.model import compute_dtype, head_is_plain, load_model
from prime_rl.trainer.reference import Reference
from prime_rl.trainer.weights import Weights


@dataclass
class Trainer:
    cfg: Config
    model: torch.nn.Module
    tokenizer: object
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    device: torch.device
    world: World
    pad_id: int
    fused: bool  # the logprobs straight from the final hidden states and a plain output layer (step.py)
    objective: Objective
    reference: Reference | None = None
    start: int = 0  # the step it trains next: a resumed checkpoint's, else 0
    weights: Weights | None = None  # how each step's weights reach the student server (a run's trainer alone)
    turn: DeviceTurn | None = None  # the run's device lock (a run's trainer alone)


def load_trainer(cfg: Config, resume: bool = False) -> Trainer:
    """A run's trainer as its loop starts: the student loaded, the latest checkpoint in the run dir where `resume`,
    its weights published for the orchestrator, then the reference loaded (the orchestrator samples meanwhile)."""
    disable_progress_bar()  # a bar per weight export would flood the log
    torch.manual_seed(cfg.seed)  # before the model: LoRA's adapter is initialised from it
    torch.set_num_threads(trainer_threads(cfg))
    world, device = init_world(cfg)  # a process group only under torchrun
    if world.size > 1:  # sharded before the optimizer: it must hold the sharded parameters
        model, tokenizer = load_sharded_model(cfg, device, world, compute_dtype(cfg, device))
    else:
        model, tokenizer = load_model(cfg, device)
    t = trainer_around(cfg, model, tokenizer, device, world)
    run_dir = RunDir(cfg.run_dir)
    t.start = (run_dir.latest_checkpoint() or 0) if resume else 0
    if t.start:
        load_checkpoint(run_dir, t.start, model, t.optimizer, t.scheduler, world)
    t.weights = Weights(cfg, model, tokenizer, world, getattr(torch, server_dtype(cfg, on_gpu(cfg))))
    t.weights.publish(t.start)
    if cfg.trainer.loss.kl_ref_tau:
        t.reference = Reference(cfg, model, device, world)
    t.turn = DeviceTurn(run_dir.device_lock, is_colocated(cfg))
    return t


def trainer_around(cfg: Config, model, tokenizer, device: torch.device, world: World = SINGLE) -> Trainer:
    """The trainer of a model already loaded: its optimizer and schedule, the fused head, the run's objective."""
    optimizer, scheduler = make_optimizer(cfg, model)
    # FSDP gathers the output layer only inside the model's forward: sharded, the logits come from the model
    fused = world.size == 1 and head_is_plain(model)
    pad_id = padding_id(tokenizer)
    return Trainer(cfg, model, tokenizer, optimizer, scheduler, device, world, pad_id, fused, Objective(cfg))


def make_optimizer(cfg: Config, model):
    """AdamW over the trainable parameters, and its lr schedule over cfg.max_steps (trainer.optim)."""
    o = cfg.trainer.optim
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)
    factor = functools.partial(lr_factor, warmup_steps=o.warmup_steps, max_steps=cfg.max_steps, schedule=o.schedule)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
