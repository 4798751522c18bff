"""mergekit's YAML merge configuration, read into a call of `inspector.merge`.

As mergekit documents it (README "Merge Configuration"; `mergekit/config.py`):

    merge_method: ties            # linear, task_arithmetic, ties, dare_linear, dare_ties,
    base_model: ./base            #   slerp, model_stock
    models:
      - model: ./math             # a folder of *.safetensors (or its index), a file, a URL
        parameters: {weight: 0.6, density: 0.5}
      - model: ./code
        parameters: {weight: 0.4, density: 0.5}
    parameters: {normalize: true, int8_mask: true, lambda: 1.0}   # for every model
    dtype: bfloat16               # the written dtype (out_dtype wins when given)

A model's own `parameters` win over the top-level ones. The base model, when also listed
under `models`, is the base and not a task vector (as in mergekit). Refused with the reason:
`slices` and `modules` (layer ranges), gradients (a list of values over layers) and
`filter:`ed values, LoRA references (`model+lora`), methods `inspector.merge` does not run,
and unknown parameters. `tokenizer_source`, `tokenizer` and `chat_template` are ignored with a
note; so is `int8_mask` (a memory saving in mergekit, no change in the result).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# mergekit's parameter names -> inspector.merge's keywords
_NAMES = {"weight": "weights", "lambda": "lam"}
_PER_MODEL = ("weight", "density")
_IGNORED_TOP = ("tokenizer_source", "tokenizer", "chat_template")
_KNOWN_TOP = {"merge_method", "models", "base_model", "parameters", "dtype", "out_dtype",
              "slices", "modules", *_IGNORED_TOP}
_DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32",
           "float16": "float16", "fp16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64"}


class ConfigError(ValueError):
    """The configuration cannot be run; the message says where and what to change."""


@dataclass(frozen=True)
class MergeJob:
    """What a configuration asks for, as `inspector.merge` takes it.

    Attributes:
        method: the merge method.
        models: the model references merged, in order (for slerp: the base model first).
        base: the base model's reference, for methods that merge task vectors.
        params: keyword arguments of `inspector.merge` (`weights`, `density`, `lam`, ...).
        dtype: the dtype to write (`out_dtype`, else `dtype`), or None to keep the result's.
        notes: what was ignored, and why.
    """

    method: str
    models: list[str]
    base: str | None
    params: dict
    dtype: str | None = None
    notes: list[str] = field(default_factory=list)


def read_config(path: str | os.PathLike) -> MergeJob:
    """Reads a mergekit YAML file.

    Raises:
        ConfigError: the file is missing or not YAML (with the line), or asks for something
            this merge cannot do (the key and the reason).
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except OSError as error:
        raise ConfigError(f"Cannot read {os.fspath(path)}: {error.strerror or error}.") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{os.fspath(path)} is not valid YAML: {error}") from None
    return from_mapping(config, os.fspath(path))


def from_mapping(config, where: str = "the configuration") -> MergeJob:
    """Reads a configuration already parsed from YAML (see `read_config`).

    >>> job = from_mapping({"merge_method": "linear", "models": [
    ...     {"model": "a", "parameters": {"weight": 0.3}}, {"model": "b",
    ...     "parameters": {"weight": 0.7}}], "dtype": "bfloat16"})
    >>> job.method, job.models, job.params, job.dtype
    ('linear', ['a', 'b'], {'weights': [0.3, 0.7]}, 'bfloat16')
    """
    from inspector.core.merge.methods import METHODS

    if not isinstance(config, dict):
        raise ConfigError(f"{where}: expected a mapping of mergekit keys (merge_method, "
                          f"models, ...), got {type(config).__name__}.")
    notes = []
    for key in ("slices", "modules"):
        if config.get(key):
            raise ConfigError(
                f"{where}: `{key}:` (layer ranges) is not supported: this merge takes whole "
                "models. List them under `models:` (every tensor is merged), or run mergekit "
                "for layer-range merges.")
    unknown = sorted(str(k) for k in config if k not in _KNOWN_TOP)
    if unknown:
        notes.append(f"ignored key(s) mergekit does not define: {', '.join(unknown)}")
    for key in _IGNORED_TOP:
        if config.get(key) is not None:
            notes.append(f"`{key}` is ignored: only the weights are merged; copy the "
                         "tokenizer files into the output folder yourself")
    method = config.get("merge_method")
    if method not in METHODS:
        raise ConfigError(
            f"{where}: merge_method {method!r} is not one this merge runs; it runs: "
            f"{', '.join(METHODS)}." if method is not None else
            f"{where}: no `merge_method:`; give one of {', '.join(METHODS)}.")
    spec = METHODS[method]
    models = config.get("models")
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{where}: `models:` must list the models to merge, each as "
                          "`- model: PATH` (with optional `parameters:`).")
    entries = [_model_entry(m, i, where) for i, m in enumerate(models)]
    base = config.get("base_model")
    if base is not None and not isinstance(base, str):
        raise ConfigError(f"{where}: base_model must be a path or URL, got {base!r}.")
    top = _parameters(config.get("parameters"), "parameters", where)
    accepted = {"int8_mask", *(_mergekit_name(p) for p in spec.params),
                *(["weight"] if spec.weighted else [])}
    for name_, params in [("parameters", top)] + [
            (f"models[{i}].parameters", p) for i, (_, p) in enumerate(entries)]:
        bad = sorted(set(params) - accepted)
        if bad:
            raise ConfigError(
                f"{where}: {name_}: {method} has no parameter {', '.join(map(repr, bad))}; it "
                f"takes: {', '.join(sorted(accepted))}.")
        whole = sorted(set(params) & accepted - set(_PER_MODEL) - {"int8_mask"})
        if name_ != "parameters" and whole:
            raise ConfigError(
                f"{where}: {name_}: {', '.join(whole)} applies to the whole merge, not one "
                "model: put it under the top-level `parameters:`.")
    if "int8_mask" in top or any("int8_mask" in p for _, p in entries):
        notes.append("`int8_mask` is ignored: it saves memory in mergekit and does not change "
                     "the result")
    if spec.needs_base or method == "slerp":
        if base is None:
            raise ConfigError(f"{where}: {method} needs `base_model:` (the model the others "
                              "were fine-tuned from" + (")." if method != "slerp" else
                                                         "; t = 0 gives it)."))
        if any(m == base for m, _ in entries):
            notes.append(f"{base} is the base model: it is not merged as one of the models")
        entries = [(m, p) for m, p in entries if m != base]
    elif base is not None and base not in [m for m, _ in entries]:
        raise ConfigError(f"{where}: linear merges the listed models only, and base_model "
                          f"{base!r} is not one of them: list it under `models:` with a "
                          "weight, or drop base_model.")
    params: dict = {}
    for name in spec.params:
        value = top.get(_mergekit_name(name))
        if value is not None and name != "density":
            params[name] = value
    if spec.weighted:
        params["weights"] = [_per_model(p, top, "weight", i, m, method, where, required=True)
                             for i, (m, p) in enumerate(entries)]
    if "density" in spec.params:
        density = [_per_model(p, top, "density", i, m, method, where, required=False)
                   for i, (m, p) in enumerate(entries)]
        if any(d is not None for d in density):
            default = spec.params["density"]
            params["density"] = [default if d is None else d for d in density]
    refs = [m for m, _ in entries]
    if method == "slerp":
        refs = [base, *refs]
    dtype = config.get("out_dtype") or config.get("dtype")
    if dtype is not None:
        if str(dtype) not in _DTYPES:
            raise ConfigError(f"{where}: dtype {dtype!r} is not one of "
                              f"{', '.join(sorted(_DTYPES))}.")
        dtype = _DTYPES[str(dtype)]
    return MergeJob(method, refs, base if spec.needs_base else None, params, dtype, notes)


def _model_entry(entry, i: int, where: str) -> tuple[str, dict]:
    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
        raise ConfigError(f"{where}: models[{i}] must be `- model: PATH` (a folder, file or "
                          f"URL), got {entry!r}.")
    return entry["model"], _parameters(entry.get("parameters"), f"models[{i}].parameters",
                                       where)


def _parameters(params, name: str, where: str) -> dict:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: {name} must be a mapping, got {params!r}.")
    for key, value in params.items():
        if isinstance(value, list | dict):
            raise ConfigError(
                f"{where}: {name}.{key} = {value!r} varies over layers (a gradient or a "
                "filtered value); this merge takes one number per parameter (per model for "
                "weight and density). Give a number, or run mergekit for per-layer values.")
        if not isinstance(value, bool | int | float):
            raise ConfigError(f"{where}: {name}.{key} must be a number or true/false, got "
                              f"{value!r}.")
    return dict(params)


def _per_model(own: dict, top: dict, key: str, i: int, model: str, method: str, where: str,
               required: bool):
    value = own.get(key, top.get(key))
    if value is None and required:
        raise ConfigError(f"{where}: models[{i}] ({model}) has no {key}; {method} needs one "
                          f"per model (under the model's `parameters:`, or once under the "
                          "top-level `parameters:`).")
    return value


def _mergekit_name(name: str) -> str:
    return {v: k for k, v in _NAMES.items()}.get(name, name)
