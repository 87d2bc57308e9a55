import os
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from prime_rl.config import Config, register_configs, to_config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

register_configs()


def compose_config(overrides: list[str] = ()) -> Config:
    """The typed config `python launch.py <overrides>` would build (no validation)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return to_config(compose(config_name="config", overrides=list(overrides)))


def launch_cmd(*overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), *overrides]


@pytest.fixture(autouse=True)
def _no_cuda_env(monkeypatch):
    """Tests decide GPU visibility themselves; the machine's own CUDA_VISIBLE_DEVICES must not leak in."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
