"""`quant_groups` over a 100,000-leaf FP8 checkpoint structure, and FP8 dequantize against
the memory-bandwidth reference (`bandwidth.py`), from one run.

    PYTHONPATH=. python benchmarks/bench_quant.py [--quick] [--only groups|dequantize]
                                                  [--compare-table] [--compare-cast]
                                                  [--compare-before]
                                                  [--stores] [--compare-groups REV]

1. quant_groups: a DeepSeek-V3-like tree of lazy leaves (no data: only shapes and dtypes are
   read), 7 linear layers per block, each an (256, 384) float8_e4m3fn weight and its (2, 3)
   float32 `weight_scale_inv`: 50,000 groups, 100,000 leaves. Target: median <= 50 ms.
   Each timed call is the first on a tree built just before it (a new object: nothing of
   an earlier call, on this tree or another, is kept and found again), interleaved with a
   bare walk of the same tree.
2. dequantize: an FP8 block-scaled tree of 1e8 parameters (host arrays placed on JAX's default
   device, `jax.devices()[0]`: the CPU here, a GPU where one is; 2048 x 2048 float8_e4m3fn
   weights with 16 x 16 float32 scales), to bfloat16, planned and compiled once
   (`PlannedRun`, as `inspector.run`); GB/s counts the bytes the op reads and writes: 1 byte
   read per code + 4 per scale + 2 written per bf16 value (3.0002 bytes a parameter),
   divided by the best copy of the same run (`bandwidth.py`, sampled between the op's).
   Where one execution takes under 20 ms (a GPU) a sample times as many executions back to
   back as fill 20 ms, ended by one wait, as the reference's XLA copy is timed (one timed
   alone would measure Python's dispatch); on this CPU a sample is one execution.
   Beside it, the floor of any XLA kernel over the same bytes: the codes only widened to
   bfloat16. The same tree packed (`inspector.pack`: one float8 and one float32 buffer) is
   sampled alternately with the plain one, in the same rounds against the same reference:
   one kernel over the flat buffers (`dequantize_packed`). Then a 60-layer tree of 420 small
   FP8 weights: an execution's cost beyond its kernels (rebuilding the result tree). Then
   the first dequantize plan of a 100,000-leaf packed FP8 layout (no data): its groups, runs
   and result layout, computed once per layout.
   `--compare-table` times the 1e8 case alternately with the CPU's former float8 decoder (a
   gather from a 256-entry table) and the current one (`kernels.fp8_bits`), in one process;
   `--compare-cast` with XLA's own float32 -> bfloat16 conversion and the current one
   (`kernels.bf16_bits`); `--compare-before` with the kernel before both this and the
   512-bit vectors (`kernels.WIDE_VECTORS`). Each prints the CPU time of each too.

`--only groups` or `--only dequantize` runs one of the two. `--stores` times the reference's
memcpy against copies by ordinary vector stores (NumPy's and XLA's): the write-allocate
that caps a CPU kernel's ratio (see `stores`).

`--compare-groups REV` times `quant_groups` alternately with the `groups.py` of git revision
REV (loaded beside the current one in this process) and the current one, CPU time, each
call the first on a fresh tree (a cache an older revision keeps across calls is emptied
before each of its calls), and checks that both give the same groups.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import inspector  # noqa: E402
from inspector.core.lazy import LazyArray, file_of  # noqa: E402

PROJS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def fp8_structure(n_leaves: int) -> dict:
    """Nested dicts of lazy leaves, as `inspector.load` gives a sharded FP8 checkpoint: each
    leaf's `_file` set to its file's one string, as the safetensors reader sets it."""
    never = lambda: None  # noqa: E731  (never read: the walk reads shapes and dtypes)
    file = file_of("x:w")
    layers, n = {}, 0
    while n < n_leaves:
        layer = {}
        for proj in PROJS:
            part, name = proj.split(".")
            weight = LazyArray((256, 384), ml_dtypes.float8_e4m3fn, never, "x:w")
            scale = LazyArray((2, 3), np.float32, never, "x:s")
            weight._file = scale._file = file
            layer.setdefault(part, {})[name] = {"weight": weight, "weight_scale_inv": scale}
            n += 2
            if n >= n_leaves:
                break
        layers[str(len(layers))] = layer
    return {"model": {"layers": layers}}


def bare_walk(node) -> int:
    """Visits every dict and leaf doing nothing: the floor of any Python walk of the tree."""
    n = 0
    for k in sorted(node):
        v = node[k]
        n += bare_walk(v) if type(v) is dict else 1
    return n


def bench_groups(n_leaves: int, repeats: int) -> None:
    quant_groups = inspector.quant_groups  # imported (with JAX) before any clock starts
    wall, cpu, floor, groups = [], [], [], []
    for _ in range(repeats):  # interleaved with the floor: the machine's load moves both
        groups = []  # the last call's records freed before the next tree is built
        tree = fp8_structure(n_leaves)  # fresh: the timed call is the first on it
        start, start_cpu = time.perf_counter(), time.process_time()
        groups = quant_groups(tree)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        gc.collect()  # the young records' first collection is not the walk's
        start = time.perf_counter()
        bare_walk(tree)
        floor.append(time.perf_counter() - start)
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    print(f"quant_groups, first call on a fresh tree of {n_leaves:,} leaves "
          f"({len(groups):,} groups): median "
          f"{ms(wall):.1f} ms wall (min {min(wall) * 1e3:.1f}, max {max(wall) * 1e3:.1f}, "
          f"n={repeats}), {ms(cpu):.1f} ms CPU; a bare walk of the same dicts {ms(floor):.1f} ms; "
          "target <= 50 ms")


def previous_groups(rev: str):
    """`quant_groups` as `inspector/core/quant/groups.py` had it at git revision `rev`."""
    from revisions import module_at

    return module_at(rev, "inspector/core/quant/groups.py", "groups_previous").quant_groups


def compare_groups(rev: str, n_leaves: int, rounds: int) -> None:
    """CPU time of `quant_groups` at `rev` and now, alternated (the machine's load moves
    both), and the same groups from both."""
    tree = fp8_structure(n_leaves)
    before, now = previous_groups(rev), inspector.quant_groups
    kept = getattr(sys.modules["groups_previous"], "_FOUND", {})  # older revisions' cache
    fields = lambda g: (g.scheme, g.path, g.members, g.shape, g.dtype,  # noqa: E731
                        g.problems, g.layout, g.block, g.steps, g.names)
    assert [fields(g) for g in before(tree)] == [fields(g) for g in now(tree)]
    times: dict = {rev: [], "now": [], "bare walk": []}
    calls = [(rev, before), ("now", now), ("bare walk", bare_walk)]
    for i in range(rounds):
        for name, fn in calls if i % 2 else calls[::-1]:  # alternated: neither goes first
            tree = fp8_structure(n_leaves)
            kept.clear()
            start = time.process_time()
            fn(tree)
            times[name].append(time.process_time() - start)
    print(f"quant_groups over {n_leaves:,} leaves, CPU time of first calls on fresh trees, "
          f"medians of {rounds} alternated calls (same groups from both): " + ", ".join(
              f"{name} {statistics.median(t) * 1e3:.1f} ms (min {min(t) * 1e3:.1f})"
              for name, t in times.items()))


def fp8_tree(n_params: float, side: int = 2048) -> dict:
    rng = np.random.default_rng(0)
    n = max(1, int(n_params) // (side * side))
    codes = rng.standard_normal((side, side)).astype(ml_dtypes.float8_e4m3fn)
    scales = rng.uniform(1e-3, 1e-2, (side // 128, side // 128)).astype(np.float32)
    return {f"l{i}": {"weight": codes.copy(), "weight_scale_inv": scales.copy()}
            for i in range(n)}


SAMPLE_SECONDS = 0.02
"""A sample lasts at least this long: faster executions are repeated back to back."""


def back_to_back(seconds: float) -> int:
    """How many executions of `seconds` each one sample times (1 on this CPU)."""
    return max(1, min(1000, int(SAMPLE_SECONDS / max(seconds, 1e-9))))


def widen_kernel(tree: dict):
    """The floor of any XLA kernel over these bytes: each weight's codes only widened to
    bfloat16 (no decode, no scale), written into donated buffers, one batched kernel."""
    import jax
    import jax.numpy as jnp

    codes = [jax.device_put(leaf["weight"].view(np.uint8)) for leaf in tree.values()]
    step = jax.jit(lambda outs, xs: [x.astype(jnp.bfloat16) for x in xs], donate_argnums=0,
                   keep_unused=True)
    outs = [jnp.zeros(c.shape, jnp.bfloat16) for c in codes]
    moved = sum(c.size * 3 for c in codes)  # 1 byte read and 2 written per code
    reps = 1

    def run() -> float:
        nonlocal outs
        start = time.perf_counter()
        for _ in range(reps):
            outs = step(outs, codes)
        jax.block_until_ready(outs)
        return reps * moved / (time.perf_counter() - start) / 1e9

    run()  # compile
    start = time.perf_counter()
    run()
    reps = back_to_back(time.perf_counter() - start)
    return run


def dequantize_sampler(tree: dict):
    """`(sample, result)`: `sample()` times back-to-back executions of the planned op and
    returns its GB/s (bytes read + written); `result` is the `RunResult` of three single
    executions (compile time, kernel calls, device)."""
    from inspector.core.op import block
    from inspector.core.runner import PlannedRun

    planned = PlannedRun(inspector.dequantize, tree, "bfloat16")  # tree: plain or packed
    out, _ = planned.execute()  # warm-up
    times = [planned.execute()[1] for _ in range(3)]
    result = planned.result(out, times)
    moved = result.bytes_read + result.bytes_written
    reps = back_to_back(statistics.median(times))

    def sample() -> float:
        start = time.perf_counter()
        for _ in range(reps):
            last = planned.plan.execute()  # each writes into the last one's donated buffers
        block(last)
        return reps * moved / (time.perf_counter() - start) / 1e9

    return sample, result, reps


def bench_many_groups(layers: int = 60) -> None:
    """A DeepSeek-like tree of `layers` x 7 small FP8 weights (128 x 128, one scale each):
    what an execution costs beyond its kernels, mostly rebuilding the result tree."""
    from inspector.core.quant import rebuild as R

    rng = np.random.default_rng(0)
    codes = rng.standard_normal((128, 128)).astype(ml_dtypes.float8_e4m3fn)
    one = np.ones((1, 1), np.float32)
    tree = {"model": {"layers": {str(i): {
        part: {name: {"weight": codes.copy(), "weight_scale_inv": one.copy()}
               for name in names}
        for part, names in (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")),
                            ("mlp", ("gate_proj", "up_proj", "down_proj")))}
        for i in range(layers)}}}
    r = inspector.run(inspector.dequantize, tree, "bfloat16", repeats=7)
    groups = [g for g in inspector.quant_groups(tree) if g.usable]
    edits, outputs = R.edits_of(groups), {id(g): None for g in groups}
    rebuild = []
    for _ in range(7):
        start = time.perf_counter()
        R.rebuild_tree(tree, (), edits, outputs)
        rebuild.append(time.perf_counter() - start)
    print(f"dequantize of {len(groups)} small fp8 weights ({layers} layers): median "
          f"{r.median_seconds * 1e3:.2f} ms an execution ({r.n_kernels} kernel calls), of "
          f"which rebuilding the result tree {statistics.median(rebuild) * 1e3:.2f} ms")
    p = inspector.run(inspector.dequantize, inspector.pack(tree), "bfloat16", repeats=7)
    print(f"  the same packed: median {p.median_seconds * 1e3:.2f} ms an execution "
          f"({p.n_kernels} kernel call(s); the result a packed tree, nothing rebuilt)")


def bench_packed_layout(n_leaves: int) -> None:
    """The first dequantize of a packed layout of `n_leaves` (FP8 weights of 16 x 256 with
    two 128 x 128 block scales each, no data): finding the groups on its structure, the
    runs (`flat_runs.build`) and the result's layout; kept per layout for later calls."""
    import jax

    from inspector.core.packed import plan_layout
    from inspector.core.quant import dequantize_packed as DP
    from inspector.core.quant import flat_runs

    s = jax.ShapeDtypeStruct
    tree = {"model": {"layers": {str(i): {
        "weight": s((16, 256), ml_dtypes.float8_e4m3fn),
        "weight_scale_inv": s((1, 2), np.float32)} for i in range(n_leaves // 2)}}}
    layout, _ = plan_layout(tree)
    layout.structure, layout.ordinals  # noqa: B018  # made by `pack` already
    start = time.perf_counter()
    flat = DP.flat_layout(layout, "bfloat16")
    whole = time.perf_counter() - start
    [runs] = flat.runs
    groups = [(g * 4096, g * 2, (16, 256), (128, 128)) for g in range(n_leaves // 2)]
    start = time.perf_counter()
    flat_runs.pieces(*flat_runs.build(runs.size, groups))
    build = time.perf_counter() - start
    print(f"packed layout of {len(layout.slots):,} leaves: first dequantize plan {whole:.2f} s "
          f"(groups, runs, result layout; kept per layout), of which the runs "
          f"({len(runs.scale_index):,}, width {runs.width}) {build * 1e3:.0f} ms")


def bench_dequantize(n_params: float, rounds: int) -> None:
    import jax
    from bandwidth import Reference

    tree = fp8_tree(n_params)
    ref = Reference()
    widen = widen_kernel(tree)
    sample, r, reps = dequantize_sampler(tree)
    # the same parameters packed (one float8 buffer, one float32 buffer of scales): one pass
    # over the flat buffers (`dequantize_packed`), a packed result
    packed = inspector.pack(tree)
    start = time.perf_counter()
    sample_packed, rp, reps_packed = dequantize_sampler(packed)
    first_packed = time.perf_counter() - start
    samples, floor, samples_packed = [], [], []
    for _ in range(rounds):
        ref.sample()
        samples.extend(sample() for _ in range(3))
        samples_packed.extend(sample_packed() for _ in range(3))
        floor.extend(widen() for _ in range(3))
    ref.sample()
    name, best = ref.best()
    op, low = statistics.median(samples), statistics.median(floor)
    op_packed = statistics.median(samples_packed)
    n = sum(leaf["weight"].size for leaf in tree.values())
    print(f"device {jax.devices()[0].device_kind} ({r.device}); bytes counted: "
          f"{r.bytes_read:,} read + {r.bytes_written:,} written "
          f"({(r.bytes_read + r.bytes_written) / n:.4f} a parameter); "
          f"{reps} execution(s) back to back a sample")
    print(f"dequantize fp8 -> bf16, {n_params:.0e} params ({len(tree)} leaves of 2048x2048, "
          f"{r.n_kernels} kernel calls, compile {r.compile_seconds:.2f} s): "
          f"{op:.1f} GB/s median ({min(samples):.1f}-{max(samples):.1f}, n={len(samples)}; "
          f"one execution alone {r.gbps:.1f}), reference {name} "
          f"{best:.1f} GB/s, ratio {op / best:.2f}; target >= 0.7")
    print(f"the same packed (inspector.pack: {len(packed.buffers)} buffers; {rp.n_kernels} "
          f"kernel call(s), compile {rp.compile_seconds:.2f} s, planned, compiled and run 4 "
          f"times in {first_packed:.2f} s; bytes counted {rp.bytes_read:,} read + "
          f"{rp.bytes_written:,} written; {reps_packed} execution(s) a sample): "
          f"{op_packed:.1f} GB/s median ({min(samples_packed):.1f}-{max(samples_packed):.1f}, "
          f"n={len(samples_packed)}; one execution alone {rp.gbps:.1f}), ratio "
          f"{op_packed / best:.2f} (plain {op / best:.2f}); target >= 0.7")
    print(f"  an XLA kernel only widening the same codes to bf16: {low:.1f} GB/s "
          f"({min(floor):.1f}-{max(floor):.1f}), ratio {low / best:.2f}")
    print(ref.summary())
    print(f"  load average {os.getloadavg()[0]:.1f}")
    ref.close()


def table_decoder(codes, code_dtype):
    """The CPU decoder before `kernels.fp8_bits`: a gather from the 256 codes' values."""
    import jax
    import jax.numpy as jnp

    values = np.arange(256, dtype=np.uint8).view(code_dtype).astype(np.float32)
    return jnp.asarray(values)[jax.lax.bitcast_convert_type(codes, jnp.uint8)]


def xla_cast(y):
    """The CPU's float32 -> bfloat16 rounding before `kernels.bf16_bits`: XLA's own."""
    import jax.numpy as jnp

    return y.astype(jnp.bfloat16)


VARIANTS = {  # name -> {kernels attribute: replacement}
    "table": {"fp8_bits": table_decoder},
    "xla-cast": {"bf16_bits": xla_cast},
    "before": {"bf16_bits": xla_cast, "cpu_options": lambda: ()},  # as at commit 702a421
    "now": {},
}


def compare(names: list[str], n_params: float, rounds: int) -> None:
    """The dequantize kernels of `VARIANTS[name]`, each planned and compiled apart, timed
    alternately with the reference copies in one process: GB/s and CPU time per execution
    (the CPU time moves less with the machine's load than the wall time)."""
    from bandwidth import report_alternated

    from inspector.core import kernel_cache
    from inspector.core.quant import kernels

    tree = fp8_tree(n_params)
    samplers = {}
    for name in names:
        saved = {attr: getattr(kernels, attr) for attr in VARIANTS[name]}
        try:
            for attr, value in VARIANTS[name].items():
                setattr(kernels, attr, value)
            kernel_cache.clear_cache()  # kernels are cached by key: build this variant's
            samplers[name] = dequantize_sampler(tree)[0]
        finally:
            for attr, value in saved.items():
                setattr(kernels, attr, value)
    report_alternated(samplers, rounds, lambda ref_name, best: (
        f"dequantize fp8 -> bf16 of {n_params:.0e} params, variants alternated ({rounds} "
        f"rounds of 3; load average {os.getloadavg()[0]:.1f}); reference {ref_name} "
        f"{best:.1f} GB/s:"))


def stores(rounds: int) -> None:
    """Why a CPU kernel's ratio is capped below 1: the reference copy (`np.copyto`, glibc's
    memcpy) writes whole cache lines without reading them first; a loop of ordinary vector
    stores (NumPy's `multiply(..., out=)`, any XLA kernel) reads each line it writes
    (write-allocate). Times the three over one 256 MiB buffer, alternated."""
    import jax
    import jax.numpy as jnp

    src = np.random.default_rng(0).standard_normal(64 << 20, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    xla = jax.jit(lambda out, x: x + jnp.float32(0), donate_argnums=0, keep_unused=True)
    x = jax.device_put(src)
    out = xla(jnp.zeros_like(x), x).block_until_ready()

    def xla_copy() -> None:
        nonlocal out
        out = xla(out, x).block_until_ready()

    kinds = {"memcpy (np.copyto)": lambda: np.copyto(dst, src),
             "vector stores (np.multiply out=)": lambda: np.multiply(src, 1, out=dst),
             "xla donated x + 0": xla_copy}
    gbps: dict = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, copy in kinds.items():
            start = time.perf_counter()
            copy()
            gbps[name].append(2 * src.nbytes / (time.perf_counter() - start) / 1e9)
    best = statistics.median(gbps["memcpy (np.copyto)"])
    print(f"copies of 256 MiB on {jax.devices()[0].device_kind}, {rounds} alternated rounds "
          f"(load average {os.getloadavg()[0]:.1f}), GB/s counting read + written:")
    for name, g in gbps.items():
        print(f"  {name:>32}: {statistics.median(g):5.1f} ({min(g):.1f}-{max(g):.1f}) "
              f"ratio {statistics.median(g) / best:.2f}")
    print("  with write-allocate a copy moves 3 bytes for 2 counted (ratio 2/3 of a memcpy "
          "that does not), a bf16 dequantize 5 for 3 counted (1 code read, 2 written, 2 read "
          "first): at most 0.6 of the memcpy")


def main() -> None:
    quick = "--quick" in sys.argv
    for flag, names in (("--compare-table", ["table", "now"]),
                        ("--compare-cast", ["xla-cast", "now"]),
                        ("--compare-before", ["before", "now"])):
        if flag in sys.argv:
            # a kernel stored on disk is found by its call's key, which a variant keeps
            os.environ["INSPECTOR_EXECUTABLE_CACHE"] = "0"
            compare(names, 1e6 if quick else 1e8, 3 if quick else 6)
            return
    if "--compare-groups" in sys.argv:
        compare_groups(sys.argv[sys.argv.index("--compare-groups") + 1],
                       10_000 if quick else 100_000, 5 if quick else 15)
        return
    if "--stores" in sys.argv:
        stores(5 if quick else 15)
        return
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    if only not in (None, "groups", "dequantize"):
        sys.exit(f"--only takes 'groups' or 'dequantize', not {only!r}")
    if only in (None, "groups"):
        bench_groups(10_000 if quick else 100_000, 3 if quick else 7)
    if only in (None, "dequantize"):
        bench_dequantize(1e6 if quick else 1e8, 2 if quick else 3)
        bench_packed_layout(10_000 if quick else 100_000)
        bench_many_groups()


if __name__ == "__main__":
    main()
