"""Models named by a Hugging Face Hub id ("Qwen/Qwen3-0.6B"), resolved to a local snapshot by huggingface_hub,
which honours HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN.

The launcher resolves each hub model once (downloading it if need be) and writes the snapshot dir into every
role's config (`model.path`, `teacher.path`), so no process downloads, and all of them load the same files even
if the revision moves on the Hub meanwhile.
"""

import re
from dataclasses import replace
from pathlib import Path

from huggingface_hub import HfApi, constants, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from prime_rl.config.schema import Config
from prime_rl.config.teachers import local_teachers, teacher_config, with_teacher
from prime_rl.config.user_error import UserError

# What vLLM and transformers load: config, weights, tokenizer and chat template; not a repo's .bin/.pth/ONNX copies,
# nor the Mistral-format copy some repos ship beside the Hugging Face files (vLLM would load that one instead).
MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]
MISTRAL_FORMAT = ["consolidated*", "params.json"]
PROBE_TIMEOUT_S = 10.0


class HubModelError(UserError):
    """A hub model that cannot be had; the message is one line."""


def is_hub_id(name: str) -> bool:
    """'org/name' or 'name', not 'tiny' and not a path that exists here: what the Hub would be asked for."""
    return (
        name != "tiny"
        and not Path(name).expanduser().exists()
        and re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", name) is not None  # ./x, ~/x, /x are paths
    )


def resolve_hub_models(cfg: Config, download: bool = True) -> Config:
    """`cfg` with `model.path` (and each local teacher's `path`) set to the snapshot of each Hub id. A dry run
    (download=False) sets it only where the snapshot is cached. Raises HubModelError."""
    m = cfg.model
    if is_hub_id(m.name):
        cfg = replace(cfg, model=replace(m, path=_snapshot_or_none(m.name, m.revision, download)))
    for name in local_teachers(cfg):
        t = teacher_config(cfg, name)
        if is_hub_id(t.model):
            cfg = with_teacher(cfg, name, replace(t, path=_snapshot_or_none(t.model, t.revision, download)))
    return cfg


def _snapshot_or_none(repo_id: str, revision: str | None, download: bool) -> str | None:
    try:
        return str(hub_snapshot(repo_id, revision, download))
    except HubModelError:
        if download:
            raise
        return None


def hub_snapshot(repo_id: str, revision: str | None, download: bool = True) -> Path:
    """The local snapshot dir of the model at `revision`; downloaded unless `download` is false or offline."""
    try:
        files = {"allow_patterns": MODEL_FILES, "ignore_patterns": MISTRAL_FORMAT}
        path = snapshot_download(repo_id, revision=revision, local_files_only=not download, **files)
    except (LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError, HfHubHTTPError) as e:
        raise HubModelError(_problem(repo_id, revision, e)) from e
    return Path(path)


def hub_model_problem(repo_id: str, revision: str | None) -> str | None:
    """Why the model cannot be had (None if it can), without downloading: the cache, else one Hub query."""
    try:
        hub_snapshot(repo_id, revision, download=False)
        return None
    except HubModelError as e:
        if constants.is_offline_mode():
            return str(e)
    try:
        HfApi().model_info(repo_id, revision=revision, timeout=PROBE_TIMEOUT_S)
        return None
    except (RepositoryNotFoundError, RevisionNotFoundError, HfHubHTTPError) as e:
        return _problem(repo_id, revision, e)
    except Exception as e:  # no route to the Hub: huggingface_hub raises its HTTP library's own network errors
        named, cache = _named(repo_id, revision), constants.HF_HUB_CACHE
        return f"{named} is not in the Hugging Face cache ({cache}) and the Hub cannot be reached ({e})"


def _problem(repo_id: str, revision: str | None, e: Exception) -> str:
    named = _named(repo_id, revision)
    if isinstance(e, GatedRepoError):
        return f"{named} is gated on the Hugging Face Hub: accept its terms there and set HF_TOKEN"
    if isinstance(e, RepositoryNotFoundError):
        return f"no model {repo_id!r} on the Hugging Face Hub (a private one needs HF_TOKEN)"
    if isinstance(e, RevisionNotFoundError):
        return f"the Hugging Face model {repo_id!r} has no revision {revision!r}"
    if isinstance(e, LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else "the Hub cannot be reached"
        return f"{named} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}"
    return f"the Hugging Face Hub refused {named}: {str(e).splitlines()[0]}"


def _named(repo_id: str, revision: str | None) -> str:
    return f"{repo_id}@{revision}" if revision else repo_id
