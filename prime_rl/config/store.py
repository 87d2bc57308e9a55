"""Registers the schema with Hydra and turns configs (composed or written to a run dir) into typed objects."""

from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from prime_rl.config.schema import Config


def register_configs() -> None:
    """Make `base_config` (the whole schema) available to `conf/config.yaml`'s defaults list."""
    ConfigStore.instance().store(name="base_config", node=Config)


def to_config(cfg: DictConfig) -> Config:
    """Typed, fully resolved Config from a composed DictConfig (raises on a missing or mistyped value, and on
    a key the schema lacks: Hydra's `+key=value` adds one even in struct mode)."""
    plain = OmegaConf.to_container(cfg)  # untyped, interpolations kept: a merge into the schema rejects extra keys
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), plain))


def load_config(path: str | Path) -> Config:
    """Read a role config the launcher wrote (`<run>/configs/<role>.yaml`) into a typed Config."""
    merged = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path))
    return OmegaConf.to_object(merged)
