"""First touch against its floors (issue 26): each job in a fresh process, interleaved with a
plain NumPy program doing the same bytes, medians (min-max) over `--rounds`.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_io.py [--hidden 512 --layers 16]
        [--rounds 3] [--cold] [--only run,pack,out,ties,structure] [--dir /tmp/bench_io]
        [--profile]

The checkpoints are GPT-2-medium-like float32 safetensors (`--hidden 1024 --layers 20` is the
issue's 1.22 GB, 244 tensors; the default `--hidden 512 --layers 16` is about 300 MB each, for a
busy machine). `--profile` adds, per job, the medians of its user and system seconds, minor
page faults (`getrusage`) and its phases: the floors time their reads, arithmetic and writes;
ours report the stream's read wait and kernel seconds (`StreamProgress`). Jobs (ours | floor):

- run:   `inspector.run(weighted_sum, [a, b], [0.5, 0.5], repeats=1, warmup=0)` on two lazy
         trees: read + place + compile + first execution | NumPy memory-maps both files and
         sums into one full-size output (one reused 16 MiB temporary).
- pack:  `pack(load(a))` | `readinto` of the file's bytes into one buffer.
- out:   `weighted_sum([a, b], [.5, .5], out=m.safetensors)` | NumPy maps both, sums through
         one reused 16 MiB buffer and writes the file.
- ties:  `merge("ties", [b, c], base=a, density=0.5, out=...)` | NumPy does TIES per tensor
         (np.partition for the top-k, sign election, disjoint mean) and writes the file.
- structure: `load` of a 106,453-tensor safetensors file | `json.loads` of its header; and
         `describe(load(...))`.
- mergekit (with `--mergekit /tmp/mk/bin/mergekit-yaml`; mergekit is never a dependency, see
         `bench_merge_mergekit.py` for a side environment): `python -m inspector merge
         linear.yml out` | `mergekit-yaml linear.yml out` on the same YAML and model folders
         (these checkpoints under GPT-2 names, `config.json`): whole processes, imports
         included, each with its peak RSS.

Our jobs import jax and the inspector's modules before their clock starts (as the floor
imports NumPy before its own). Warm: the files were just read (page cache). `--cold` also
times run/pack and their floors with every input evicted first by
`os.posix_fadvise(POSIX_FADV_DONTNEED)` (only clean pages of files nobody maps are dropped;
the report says "cold (fadvise)").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CHUNK = 16 * 2**20


# --- the checkpoints -------------------------------------------------------------------------

def gpt2_like(hidden: int, layers: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"wte.weight": (50257, hidden), "wpe.weight": (1024, hidden),
              "ln_f.weight": (hidden,), "ln_f.bias": (hidden,)}
    for i in range(layers):
        p = f"h.{i}."
        shapes |= {p + "ln_1.weight": (hidden,), p + "ln_1.bias": (hidden,),
                   p + "attn.c_attn.weight": (hidden, 3 * hidden),
                   p + "attn.c_attn.bias": (3 * hidden,),
                   p + "attn.c_proj.weight": (hidden, hidden), p + "attn.c_proj.bias": (hidden,),
                   p + "ln_2.weight": (hidden,), p + "ln_2.bias": (hidden,),
                   p + "mlp.c_fc.weight": (hidden, 4 * hidden), p + "mlp.c_fc.bias": (4 * hidden,),
                   p + "mlp.c_proj.weight": (4 * hidden, hidden),
                   p + "mlp.c_proj.bias": (hidden,)}
    return {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}


def write_safetensors(flat: dict, path: Path) -> None:
    from safetensors.numpy import save_file

    save_file(flat, str(path))


def many_tensors(path: Path, n: int = 106_453) -> None:
    """A DeepSeek-V3-like header: 69 layers x 256 experts x 3 projections x (weight, scale)
    plus others, each tensor 4 bytes of data (structure is what is timed)."""
    header, offset = {}, 0
    names = [f"model.layers.{layer}.mlp.experts.{e}.{proj}.{kind}"
             for layer in range(69) for e in range(256)
             for proj in ("gate_proj", "up_proj", "down_proj")
             for kind in ("weight", "weight_scale_inv")]
    names += [f"model.layers.{i // 7}.self_attn.extra_{i % 7}.weight"
              for i in range(n - len(names))]
    for name in names[:n]:
        header[name] = {"dtype": "F32", "shape": [1], "data_offsets": [offset, offset + 4]}
        offset += 4
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))


def data_section(path: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    return 8 + n, os.path.getsize(path) - 8 - n


def evict(*paths: str) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# --- the jobs (run in a child process; each returns seconds) ----------------------------------

PHASES: dict[str, float] = {}
"""Seconds a job spent in its phases (`--profile`): the floors time their writes and the
rest; ours report the stream's read wait and kernel time (`StreamProgress`)."""


def usage(before, seconds: float) -> dict:
    """What the job cost between `before` (a `getrusage`) and now, with its phases."""
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": round(seconds, 3), "user": round(after.ru_utime - before.ru_utime, 3),
            "sys": round(after.ru_stime - before.ru_stime, 3),
            "minflt": after.ru_minflt - before.ru_minflt,
            "majflt": after.ru_majflt - before.ru_majflt,
            "ctxsw": (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw),
            **{k: round(v, 3) for k, v in PHASES.items()}}


class _Timed:
    """Adds the seconds spent inside the `with` to `PHASES[name]`."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        PHASES[self.name] = PHASES.get(self.name, 0.0) + time.perf_counter() - self.start


def _phases(report) -> None:
    """A `progress=` callback keeping the stream's own read and kernel seconds."""
    PHASES["read_wait"] = report.read_seconds
    PHASES["kernel"] = report.compute_seconds

def floor_run(a: str, b: str) -> float:
    start = time.perf_counter()
    (off, n) = data_section(a)
    xa = np.memmap(a, np.float32, "r", off, (n // 4,))
    xb = np.memmap(b, np.float32, "r", off, (n // 4,))
    out = np.empty(n // 4, np.float32)
    tmp = np.empty(CHUNK // 4, np.float32)
    for s in range(0, n // 4, CHUNK // 4):
        e = min(s + CHUNK // 4, n // 4)
        np.multiply(xa[s:e], 0.5, out=out[s:e])
        np.multiply(xb[s:e], 0.5, out=tmp[: e - s])
        out[s:e] += tmp[: e - s]
    float(out[-1])
    return time.perf_counter() - start


def _imported():
    """Imports what the job uses before its clock starts (the floor's `import numpy` is not
    timed either): `import inspector` is lazy, and jax's import alone is 1-3 s here."""
    import inspector
    from inspector import ops  # noqa: F401
    from inspector.core import runner  # noqa: F401
    from inspector.io import formats  # noqa: F401

    return inspector


def ours_run(a: str, b: str) -> float:
    inspector = _imported()
    start = time.perf_counter()
    r = inspector.run(inspector.weighted_sum, [inspector.load(a), inspector.load(b)],
                      [0.5, 0.5], repeats=1, warmup=0)
    seconds = time.perf_counter() - start
    from inspector.core.kernel_cache import kernel_counts

    print(json.dumps({"read": r.read_seconds, "compile": r.compile_seconds,
                      "first": r.times[0], "n_compiled": r.n_compiled, **kernel_counts()}),
          file=sys.stderr)
    return seconds


def floor_read(a: str) -> float:
    start = time.perf_counter()
    buf = bytearray(os.path.getsize(a))
    with open(a, "rb", buffering=0) as f:
        f.readinto(buf)
    return time.perf_counter() - start


def ours_pack(a: str) -> float:
    inspector = _imported()

    start = time.perf_counter()
    inspector.pack(inspector.load(a))
    return time.perf_counter() - start


def floor_out(a: str, b: str, out: str) -> float:
    start = time.perf_counter()
    off, n = data_section(a)
    with open(a, "rb") as f:
        head = f.read(off)
    xa = np.memmap(a, np.float32, "r", off, (n // 4,))
    xb = np.memmap(b, np.float32, "r", off, (n // 4,))
    buf, tmp = np.empty(CHUNK // 4, np.float32), np.empty(CHUNK // 4, np.float32)
    with open(out, "wb") as f:
        f.write(head)
        for s in range(0, n // 4, CHUNK // 4):
            e = min(s + CHUNK // 4, n // 4)
            with _Timed("compute"):  # reading the maps (faults) is in here too
                np.multiply(xa[s:e], 0.5, out=buf[: e - s])
                np.multiply(xb[s:e], 0.5, out=tmp[: e - s])
                buf[: e - s] += tmp[: e - s]
            with _Timed("write"):
                f.write(memoryview(buf[: e - s]))
    return time.perf_counter() - start


def ours_out(a: str, b: str, out: str) -> float:
    inspector = _imported()

    start = time.perf_counter()
    inspector.weighted_sum([inspector.load(a), inspector.load(b)], [0.5, 0.5], out=out,
                           progress=_phases)
    seconds = time.perf_counter() - start
    from inspector.core.kernel_cache import kernel_counts

    print(json.dumps(kernel_counts()), file=sys.stderr)
    return seconds


def floor_ties(base: str, b: str, c: str, out: str, density: float = 0.5) -> float:
    from safetensors import safe_open

    start = time.perf_counter()
    off, _ = data_section(base)
    with open(base, "rb") as f:
        head = f.read(off)
    with safe_open(base, "np") as fb, safe_open(b, "np") as f1, safe_open(c, "np") as f2, \
            open(out, "wb") as f:
        f.write(head)
        for name in json.loads(head[8:]):
            if name == "__metadata__":
                continue
            with _Timed("read"):
                x0 = fb.get_tensor(name).reshape(-1)
                x1, x2 = f1.get_tensor(name).reshape(-1), f2.get_tensor(name).reshape(-1)
            start_compute = time.perf_counter()
            ds = [x1 - x0, x2 - x0]
            k = int(density * x0.size)
            for d in ds:
                if k < d.size:
                    mag = np.abs(d)
                    d[mag < np.partition(mag, d.size - k)[d.size - k]] = 0
            s = np.sign(ds[0] + ds[1])
            keep = [np.sign(d) == s for d in ds]
            den = keep[0].astype(np.float32) + keep[1]
            num = ds[0] * keep[0] + ds[1] * keep[1]
            merged = x0 + np.divide(num, den, out=np.zeros_like(num), where=den > 0)
            PHASES["compute"] = PHASES.get("compute", 0.0) + time.perf_counter() - start_compute
            with _Timed("write"):
                f.write(memoryview(merged))
    return time.perf_counter() - start


def ours_ties(base: str, b: str, c: str, out: str) -> float:
    inspector = _imported()

    start = time.perf_counter()
    inspector.merge("ties", [inspector.load(b), inspector.load(c)], base=inspector.load(base),
                    density=0.5, out=out, progress=_phases)
    return time.perf_counter() - start


def floor_json(path: str) -> float:
    start = time.perf_counter()
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        json.loads(f.read(n))
    return time.perf_counter() - start


def ours_load(path: str) -> float:
    inspector = _imported()

    start = time.perf_counter()
    inspector.load(path)
    return time.perf_counter() - start


def ours_describe(path: str) -> float:
    inspector = _imported()

    tree = inspector.load(path)
    start = time.perf_counter()
    inspector.describe(tree)
    return time.perf_counter() - start


JOBS = {f.__name__: f for f in (floor_run, ours_run, floor_read, ours_pack, floor_out,
                                ours_out, floor_ties, ours_ties, floor_json, ours_load,
                                ours_describe)}


def child(name: str, args: list[str], cold: list[str] | None = None,
          profile: bool = False) -> tuple[float, str, dict]:
    if cold:
        evict(*cold)
    done = subprocess.run([sys.executable, __file__, "--child", name, *args]
                          + (["--profile"] if profile else []),
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    lines = done.stderr.strip().splitlines()
    found = [json.loads(x[8:]) for x in lines if x.startswith("profile ")]
    rest = "\n".join(x for x in lines if not x.startswith("profile "))
    return float(done.stdout.strip().splitlines()[-1]), rest[-300:], (found or [{}])[-1]


def profile_line(name: str, runs: list[dict]) -> str:
    """The medians of a job's `--profile` figures over its rounds."""
    keys = [k for k in runs[0] if all(k in r for r in runs)]
    return f"|  profile {name}: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in runs):g}" for k in keys) + " | | | | |"


def line(label: str, ours: list[float], floor: list[float], target: str) -> str:
    def s(xs):
        return f"{statistics.median(xs):6.3f} s ({min(xs):.3f}-{max(xs):.3f})"

    ratio = statistics.median(ours) / statistics.median(floor)
    return f"| {label} | {s(ours)} | {s(floor)} | {ratio:.2f} | {target} |"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", nargs="+")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold", action="store_true")
    p.add_argument("--only", default="run,pack,out,ties,structure")
    p.add_argument("--dir", default="/tmp/bench_io")
    p.add_argument("--profile", action="store_true",
                   help="also print each job's user/system seconds, page faults and phases")
    p.add_argument("--mergekit", help="mergekit-yaml of a side environment (the mergekit job)")
    args = p.parse_args()
    if args.child:
        name = args.child[0]
        if args.profile:
            _imported() if name.startswith("ours") else __import__("safetensors.numpy")
            before = resource.getrusage(resource.RUSAGE_SELF)
        seconds = JOBS[name](*args.child[1:])
        if args.profile:
            print("profile " + json.dumps(usage(before, seconds)), file=sys.stderr)
        print(seconds)
        return
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    files = [d / f"{n}-{args.hidden}x{args.layers}.safetensors" for n in "abc"]
    checkpoints = bool(only - {"structure"})  # `--only structure` writes (and times) no more
    for i, f in enumerate(files):
        if checkpoints and not f.exists():
            write_safetensors(gpt2_like(args.hidden, args.layers, i), f)
    many = d / "many-106453.safetensors"
    if not many.exists():
        many_tensors(many)
    a, b, c = map(str, files)
    out = str(d / "merged.safetensors")
    if checkpoints:
        size = os.path.getsize(a) / 1e9
        with open(a, "rb") as f:
            n_tensors = len(json.loads(f.read(data_section(a)[0])[8:]))
        print(f"# bench_io: 2 checkpoints of {size:.3f} GB ({n_tensors} "
              f"tensors), {args.rounds} rounds, fresh process per figure, interleaved; "
              f"cpus={os.cpu_count()}")
    else:
        print(f"# bench_io: {args.rounds} rounds, fresh process per figure, interleaved; "
              f"cpus={os.cpu_count()}")
    print("| job | ours median (min-max) | floor median (min-max) | ratio | target |")
    print("|---|---|---|---|---|")
    pairs = []
    if "run" in only:
        pairs.append(("run weighted_sum, warm", ("ours_run", [a, b]), ("floor_run", [a, b]),
                      "<= 1.3x + 0.25 s", None))
        if args.cold:
            pairs.append(("run weighted_sum, cold (fadvise)", ("ours_run", [a, b]),
                          ("floor_run", [a, b]), "<= 1.3x + 0.25 s", [a, b]))
    if "pack" in only:
        pairs.append(("pack(load(a)), warm", ("ours_pack", [a]), ("floor_read", [a]),
                      "<= 1.3x", None))
        if args.cold:
            pairs.append(("pack(load(a)), cold (fadvise)", ("ours_pack", [a]),
                          ("floor_read", [a]), "<= 1.3x", [a]))
    if "out" in only:
        pairs.append(("weighted_sum out=, warm", ("ours_out", [a, b, out]),
                      ("floor_out", [a, b, out]), "<= 1.3x", None))
    if "ties" in only:
        pairs.append(("merge ties out= (density 0.5), warm", ("ours_ties", [a, b, c, out]),
                      ("floor_ties", [a, b, c, out]), "<= 1.3x", None))
    if "structure" in only:
        pairs.append(("load 106,453 tensors", ("ours_load", [str(many)]),
                      ("floor_json", [str(many)]), "<= 1.3x", None))
        pairs.append(("describe 106,453 tensors (floor: json)", ("ours_describe", [str(many)]),
                      ("floor_json", [str(many)]), "<= 0.3 s", None))
    if "mergekit" in only and args.mergekit:
        mergekit_rows(d, args)
    for label, (ours, oargs), (floor, fargs), target, cold in pairs:
        if cold is None:  # warm the page cache once
            for f in set(oargs) - {out}:
                floor_read(f)
        times = {"ours": [], "floor": []}
        profiles = {"ours": [], "floor": []}
        notes = []
        for r in range(args.rounds):
            order = [("floor", floor, fargs), ("ours", ours, oargs)]
            for who, name, xs in order if r % 2 == 0 else order[::-1]:
                seconds, err, used = child(name, xs, cold, args.profile)
                times[who].append(seconds)
                profiles[who].append(used)
                if err and who == "ours":
                    notes.append(err)
        print(line(label, times["ours"], times["floor"], target), flush=True)
        if args.profile:
            print(profile_line(ours, profiles["ours"]))
            print(profile_line(floor, profiles["floor"]))
        if notes and ours == "ours_run":
            print(f"|  (phases of ours, last round: {notes[-1]}) | | | | |")


def mergekit_rows(d: Path, args) -> None:
    """Our CLI's linear merge against mergekit-yaml's, whole processes, interleaved."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_merge_mergekit import CONFIG, timed
    from safetensors.numpy import load_file

    folders = []
    for name, seed in (("a", 0), ("b", 1)):
        folders.append(folder := d / f"mk-{name}-{args.hidden}x{args.layers}")
        if (folder / "model.safetensors").exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {f"transformer.{k}": v for k, v in
                   gpt2_like(args.hidden, args.layers, seed).items()}
        write_safetensors(tensors, folder / "model.safetensors")
        (folder / "config.json").write_text(json.dumps({
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "n_layer": args.layers, "n_embd": args.hidden, "n_head": args.hidden // 64,
            "n_positions": 1024, "vocab_size": 50257}))
    config = d / "linear.yml"
    config.write_text(CONFIG.format(a=folders[0], b=folders[1]))
    order = [("ours", [sys.executable, "-m", "inspector", "merge", str(config),
                       str(d / "mk-ours"), "--quiet"]),
             ("theirs", [args.mergekit, str(config), str(d / "mk-theirs"), "--lazy-unpickle",
                         "--allow-crimes", "--no-copy-tokenizer"])]
    runs = {"ours": [], "theirs": []}
    for r in range(args.rounds):
        for who, cmd in order if r % 2 == 0 else order[::-1]:
            subprocess.run(["rm", "-rf", str(d / f"mk-{who}")], check=True)
            runs[who].append(timed(cmd))
    secs = {who: [s for s, _ in xs] for who, xs in runs.items()}
    rss = {who: max(m for _, m in xs) for who, xs in runs.items()}
    ours = load_file(str(d / "mk-ours" / "model.safetensors"))
    theirs = {k: v for f in sorted((d / "mk-theirs").glob("*.safetensors"))
              for k, v in load_file(str(f)).items()}
    worst = max(float(np.max(np.abs(ours[k] - theirs[k]))) for k in theirs)
    label = (f"merge linear, `python -m inspector merge` (floor column: `mergekit-yaml`), whole "
             f"processes; peak RSS {rss['ours']:.2f} vs {rss['theirs']:.2f} GB; max abs diff "
             f"{worst:.2g}, {len(set(ours) ^ set(theirs))} tensors in one only")
    print(line(label, secs["ours"], secs["theirs"], "< 1 (faster than mergekit)"), flush=True)


if __name__ == "__main__":
    main()
