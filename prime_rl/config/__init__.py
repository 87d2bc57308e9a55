from prime_rl.config.schema import Config, TeacherKind, TrainingMode, WandbMode
from prime_rl.config.store import compose_config, load_config, register_configs, to_config
from prime_rl.config.validate import ConfigError, validate

__all__ = [
    "Config",
    "ConfigError",
    "TeacherKind",
    "TrainingMode",
    "WandbMode",
    "compose_config",
    "load_config",
    "register_configs",
    "to_config",
    "validate",
]
