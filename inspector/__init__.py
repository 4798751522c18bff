"""pytree-inspector: see any JAX pytree or checkpoint, and run jitted operations on it.

    import inspector
    inspector.describe(params)                      # one Row per node
    inspector.weighted_sum([a, b, c], [1, 2, 3])    # model soups, task arithmetic, SGD, EMA
    inspector.index(tree, [1, "1:3", None, -1])     # a different index per subtree
    inspector.stack(ensemble); inspector.unstack(stacked)
    inspector.merge("ties", [ft1, ft2], base=pre, density=0.2)   # mergekit's merge methods
    inspector.run(inspector.weighted_sum, [a, b], [0.5, 0.5], device="cpu:0")  # timed
    inspector.diff(model_tree, inspector.load("ckpt.safetensors"))
    m = inspector.mesh({"data": 4, "model": 2})     # JAX's own Mesh over jax.devices()
    inspector.shard(params, m, {"w": "data, model", "b": None})   # NamedSharding per leaf

Names are resolved on first use: `import inspector` stays cheap (`panel serve inspector`
executes this file as a throwaway package) and never loads a UI library.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    # errors
    "InspectorError": "inspector.core.errors",
    "StructureMismatchError": "inspector.core.errors",
    "IndexParseError": "inspector.core.errors",
    "IndexOutOfRangeError": "inspector.core.errors",
    "UnsupportedLeafError": "inspector.core.errors",
    "LoadError": "inspector.core.errors",
    "ShardingError": "inspector.core.errors",
    "TreeDepthError": "inspector.core.errors",
    # errors that are not the file's fault (issue 27: honest errors)
    "MissingDependencyError": "inspector.core.errors",
    "ReaderBugError": "inspector.core.errors",
    # describing and comparing
    "Row": "inspector.core.describe",
    "describe": "inspector.core.describe",
    "Difference": "inspector.core.diff",
    "diff": "inspector.core.diff",
    "LazyArray": "inspector.core.lazy",
    "PackedTree": "inspector.core.packed",
    "pack": "inspector.core.packed",
    "WorkingSet": "inspector.core.working_set",
    # operations
    "weighted_sum": "inspector.ops",
    "weighted_sum_dtype": "inspector.core.weighted_sum",
    "index": "inspector.ops",
    "parse_index": "inspector.core.index.parse",
    "format_index": "inspector.core.index.parse",
    "merge": "inspector.ops",
    "stack": "inspector.ops",
    "unstack": "inspector.ops",
    # meshes and sharded trees
    "mesh": "inspector.core.sharding",
    "shard": "inspector.core.sharding",
    "device_bytes": "inspector.core.sharding",
    "parse_spec": "inspector.core.spec_parse",
    # running
    "Op": "inspector.core.op",
    "run": "inspector.core.runner",
    "RunResult": "inspector.core.runner",
    "devices": "inspector.core.devices",
    "device_name": "inspector.core.devices",
    "resolve_device": "inspector.core.devices",
    "compile_count": "inspector.core.compile_count",
    "clear_cache": "inspector.core.kernel_cache",
    "set_cache_limit": "inspector.core.kernel_cache",
    "cached_kernels": "inspector.core.kernel_cache",
    # every cache in one registry (issue 27)
    "clear_caches": "inspector.core.caches",
    # health and history (issue 24): scans for NaN/Inf and norms, timelines across checkpoints
    "scan": "inspector.core.health.scan",
    "Scan": "inspector.core.health.scan",
    "LeafStats": "inspector.core.health.leaf_stats",
    "timeline": "inspector.health",
    "Timeline": "inspector.core.health.timeline",
    # porting between frameworks (align key paths and layouts, convert)
    "align": "inspector.core.port.align",
    "Alignment": "inspector.core.port.alignment",
    "Pair": "inspector.core.port.alignment",
    "Transform": "inspector.core.port.transforms",
    "convert": "inspector.ops",
    # checkpoints
    "load": "inspector.io",
    "save": "inspector.io",
    # quantized weights (fp8, mxfp4, gptq, awq) as one logical leaf
    "QuantGroup": "inspector.core.quant",
    "quant_groups": "inspector.core.quant",
    "dequantize": "inspector.ops",
    # checkpoints as people have them: foreign objects in pickles, kept inert
    "Opaque": "inspector.core.opaque",
    # GGUF and sharded checkpoints: file-level facts, index checks
    "file_info": "inspector.io.file_info",
    "FileInfo": "inspector.io.file_info",
    "check_index": "inspector.io.sharded_index",
    "IndexProblem": "inspector.io.sharded_index",
    # the UI (imports panel when first used)
    "show": "inspector.ui.notebook",
    "Inspector": "inspector.ui.notebook",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'inspector' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
