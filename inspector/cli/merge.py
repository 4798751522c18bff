"""`pytree-inspector merge CONFIG.yml OUT_DIR`: a mergekit YAML merge, run by our engine.

    pytree-inspector merge ties.yml ./merged            # model.safetensors + config.json
    pytree-inspector merge soup.yml ./merged --out-shard-size 2B --json

The configuration is mergekit's (see `mergekit_config.py` for what is read and what is
refused). Each model is a local folder (its `model.safetensors.index.json`, its single
`*.safetensors`, or what `inspector.load` reads there), a checkpoint file, or a URL. The merge
is `inspector.merge`'s plan streamed into the folder (each output tensor computed from its
inputs, read once, and written before the next: memory holds one tensor per model), sharded
past `--out-shard-size`; `config.json` is copied from the base model's folder (else the first
model's) and the YAML is kept as `mergekit_config.yml`. Prints the time and peak memory.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from inspector.cli.output import CLEAN, Output, add_device, common_options

_SIZE_UNITS = {"": 1, "K": 1000, "M": 1000**2, "B": 1000**3, "G": 1000**3, "T": 1000**4}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "merge", parents=[common_options()], help="merge models as a mergekit YAML says",
        description="Merge models as a mergekit YAML configuration says (merge_method, models "
        "with their weight/density, base_model, parameters, dtype), streamed into OUT_DIR as "
        "model.safetensors (or shards and model.safetensors.index.json) with the base "
        "model's config.json. Exit status 2 when the configuration asks for something this "
        "merge does not do (slices, gradients, other methods).")
    parser.add_argument("config", help="the mergekit YAML file")
    parser.add_argument("out_dir", help="the folder to write the merged model into")
    parser.add_argument("--out-shard-size", type=_size, default=None, metavar="SIZE",
                        help="bytes per output file before sharding, as mergekit writes it: "
                        "5B (the default: 5 GB), 500M, 64K or a number")
    add_device(parser, "the merge kernels run")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    from inspector.cli.mergekit_config import ConfigError, read_config
    from inspector.core.errors import InspectorError

    try:
        job = read_config(args.config)
        sources = [resolve_model(ref) for ref in job.models]
        base_source = resolve_model(job.base) if job.base is not None else None
    except (ConfigError, InspectorError) as error:
        return out.fail(str(error))
    for note in job.notes:
        out.note(note)
    import inspector
    from inspector.cli.loading import load_or_fail
    from inspector.core.lazy_result import lazy_result
    from inspector.core.merge import plan_merge
    from inspector.core.node_text import human_bytes
    from inspector.io.model_folder import SHARD_BYTES, save_model_folder

    start = time.perf_counter()
    trees = [load_or_fail(path, out) for path, _ in sources]
    base = load_or_fail(base_source[0], out) if base_source is not None else None
    folder = Path(args.out_dir)

    def write(progress):
        plan = plan_merge(job.method, trees, base=base, device=args.device, **job.params)
        merged = lazy_result(plan, progress.rate)
        if job.dtype is not None:
            merged = _cast(merged, job.dtype)
        return merged, save_model_folder(merged, folder, args.out_shard_size or SHARD_BYTES,
                                         metadata={"format": "pt"})

    merged, files = out.write_or_fail("merging", f"into {folder}", write)
    seconds = time.perf_counter() - start
    configs = [base_source] if base_source is not None else []
    config_from = next((f for _, f in configs + sources if f and (f / "config.json").is_file()),
                       None)
    if config_from is not None:
        shutil.copyfile(config_from / "config.json", folder / "config.json")
    shutil.copyfile(args.config, folder / "mergekit_config.yml")
    peak = _peak_rss()
    root = inspector.describe(merged)[0]
    if out.json:
        out.record("merge", method=job.method, models=job.models, base=job.base,
                   out_dir=str(folder), files=[p.name for p in files],
                   config_json=str(config_from / "config.json") if config_from else None,
                   tensors=root.n_leaves, bytes=root.nbytes, seconds=round(seconds, 3),
                   peak_rss_bytes=peak)
    else:
        what = files[0].name if len(files) == 1 else f"{len(files) - 1} shards + {files[-1].name}"
        out.line(f"merged {len(trees)} model(s) by {job.method} into {folder}/ ({what}): "
                 f"{root.n_leaves:,} tensors, {human_bytes(root.nbytes)} in {seconds:.2f} s, "
                 f"peak memory {human_bytes(peak)}")
        if config_from is None:
            out.note("no config.json beside the base or first model: none copied.")
    return CLEAN


def resolve_model(ref: str) -> tuple[str, Path | None]:
    """Returns `(what inspector.load opens, the model's folder or None)` for a model reference:
    a URL, a file, or a folder (its file as `loading.model_file` finds it).

    Raises:
        ConfigError: a local path that does not exist (with how to get a Hugging Face repo),
            or a LoRA reference.
        LoadError: a folder of several `*.safetensors` without an index.
    """
    from inspector.cli.loading import model_file
    from inspector.cli.mergekit_config import ConfigError
    from inspector.io.locate import is_url

    if is_url(ref):
        return ref, None
    path = Path(ref).expanduser()
    if path.is_file():
        return str(path), path.parent if path.name.endswith(".index.json") else None
    if not path.is_dir():
        if "+" in ref:
            raise ConfigError(f"model {ref!r}: LoRA references (model+lora) are not supported; "
                              "merge the LoRA into its model first.")
        raise ConfigError(
            f"model {ref!r} is not a local folder, file or URL. A Hugging Face repo must be "
            f"downloaded first (huggingface-cli download {ref} --local-dir DIR, then give "
            f"DIR), or name its file as hf://{ref}/model.safetensors.")
    return str(model_file(path)), path


def _cast(tree, dtype: str):
    """The lazy tree with each leaf cast to `dtype` as it is read (written once, cast once)."""
    import numpy as np

    from inspector.core.lazy import LazyArray
    from inspector.io.dtypes import dtype_from_name

    target = dtype_from_name(dtype)

    def cast(node):
        if isinstance(node, dict):
            return {k: cast(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return type(node)(cast(v) for v in node)
        if isinstance(node, LazyArray) and node.dtype != target:
            return LazyArray(node.shape, target, lambda: np.asarray(node).astype(target),
                             source=node.source)
        return node

    return cast(tree)


def _peak_rss() -> int:
    """This process's peak resident memory, in bytes (Linux reports KiB, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _size(text: str) -> int:
    """`5B` -> 5,000,000,000 bytes, `500M`, `64K`, `1234` (mergekit's --out-shard-size)."""
    import argparse

    unit = text[-1:].upper() if text[-1:].isalpha() else ""
    try:
        value = float(text[:-1] if unit else text) * _SIZE_UNITS[unit]
    except (KeyError, ValueError):
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size such as 5B, 500M, 64K or 1000")
    return int(value)
