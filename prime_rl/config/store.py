"""Registers the schema with Hydra and turns configs (composed or written to a run dir) into typed objects."""

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from prime_rl.config.modes import MODES
from prime_rl.config.schema import Config, node_cpus, node_gpus, node_mem_gb, num_nodes

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_config(overrides: Sequence[str] = ()) -> Config:
    """The typed config `python launch.py <overrides>` builds (not validated), composed through Hydra's public
    API: for tests, benchmarks and generated docs, outside any running Hydra app."""
    return to_config(composed(overrides))


def composed(overrides: Sequence[str] = (), with_hydra: bool = False) -> DictConfig:
    """The untyped config Hydra composes from `overrides`; `with_hydra`: with Hydra's own node (its launcher's
    parameters resolved against this config), as a Hydra app sees it."""
    with hydra_conf():
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)


@contextmanager
def hydra_conf() -> Iterator[None]:
    """Hydra initialized on `conf/` outside any running Hydra app (GlobalHydra's config loader is this one inside)."""
    register_configs()
    GlobalHydra.instance().clear()  # a Hydra left initialized (a test, a notebook) would make initialize refuse
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def register_configs() -> None:
    """Make `base_config` (the whole schema) available to `conf/config.yaml`'s defaults list, each built-in mode's
    own knobs to its training_mode group (`/mode@modes.<name>: <name>`: typed, so a misspelt knob is refused), and the
    resolvers the SLURM presets use: `${deployment_gpus:${deployment}}`, the GPUs one node of a job uses,
    `${deployment_nodes:${deployment}}`, its nodes, and `deployment_cpus` / `deployment_mem_gb`, the CPUs and host
    memory a node of a GPU job asks for (conf/hydra/launcher/slurm*.yaml)."""
    store = ConfigStore.instance()
    store.store(name="base_config", node=Config)
    for mode in MODES.values():
        if mode.config is not None:
            store.store(group="mode", name=mode.name, node=mode.config)
    OmegaConf.register_new_resolver("deployment_gpus", node_gpus, replace=True)
    OmegaConf.register_new_resolver("deployment_nodes", num_nodes, replace=True)
    OmegaConf.register_new_resolver("deployment_cpus", node_cpus, replace=True)
    OmegaConf.register_new_resolver("deployment_mem_gb", node_mem_gb, replace=True)


def to_config(cfg: DictConfig | dict) -> Config:
    """Typed, fully resolved Config from a composed DictConfig or its plain container (raises on a missing or
    mistyped value, and on a key the schema lacks: Hydra's `+key=value` adds one even in struct mode)."""
    plain = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg)  # untyped: the merge rejects extra keys
    return OmegaConf.to_object(OmegaConf.merge(schema(), plain))


def load_config(path: str | Path) -> Config:
    """Read a role config the launcher wrote (`<run>/configs/<role>.yaml`) into a typed Config."""
    return OmegaConf.to_object(OmegaConf.merge(schema(), OmegaConf.load(path)))


@functools.cache
def schema() -> DictConfig:
    """The empty typed schema, built once: building it costs 5x copying it, and a merge copies its first
    argument anyway (a 100-point sweep validates 100 configs, BENCHMARKS.md §5)."""
    return OmegaConf.structured(Config)
