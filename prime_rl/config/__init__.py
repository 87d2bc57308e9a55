from prime_rl.config.rules import check_rules
from prime_rl.config.schema import Config, TeacherKind, WandbMode
from prime_rl.config.store import compose_config, load_config, register_configs, to_config
from prime_rl.config.user_error import ConfigError

__all__ = [
    "Config",
    "ConfigError",
    "TeacherKind",
    "WandbMode",
    "check_rules",
    "compose_config",
    "load_config",
    "register_configs",
    "to_config",
]
