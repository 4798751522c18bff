"""GGUF structure of a 1 GB-class file: `inspector.load` (header only) vs gguf's own GGUFReader.

The files are TinyLlama-1.1B-shaped (22 layers, hidden 2048, FFN 5632, GQA k/v 256) with every
matrix Q8_0 and the norms F32: 201 tensors, 1.17 GB. Their headers (key/values with a real-size
tokenizer, tensor infos) are written by `gguf.GGUFWriter`; the data section is *sparse*
(the file is extended with `truncate`, no data written): structure reads the header only, so
the timing is the same as for a file of real weights in the page cache. Two tokenizers:
llama-2's (32,000 tokens with scores and types) and llama-3's (128,256 tokens and 280,147
merges), since walking a vocabulary is most of the header's cost.

    python benchmarks/bench_gguf.py [--repeats 30]

Prints, per file: the median time of `inspector.load` (the tree of lazy leaves),
`gguf_format.read` (the checked header alone), the same read with the vocabulary walked string
by string (`gguf_strings` switched off: the walk before it), the bytes they read, and one run
of `gguf.GGUFReader` for reference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import gguf
import numpy as np

import inspector
from inspector.io import gguf_format, gguf_header

Q8_0 = gguf.GGMLQuantizationType.Q8_0
TARGET_MS = 50.0


def tinyllama_tensors():
    """(name, logical shape, ggml type) of a TinyLlama-1.1B-shaped model."""
    hidden, ffn, kv, vocab = 2048, 5632, 256, 32000
    yield "token_embd.weight", (vocab, hidden), Q8_0
    for i in range(22):
        yield f"blk.{i}.attn_norm.weight", (hidden,), gguf.GGMLQuantizationType.F32
        yield f"blk.{i}.attn_q.weight", (hidden, hidden), Q8_0
        yield f"blk.{i}.attn_k.weight", (kv, hidden), Q8_0
        yield f"blk.{i}.attn_v.weight", (kv, hidden), Q8_0
        yield f"blk.{i}.attn_output.weight", (hidden, hidden), Q8_0
        yield f"blk.{i}.ffn_norm.weight", (hidden,), gguf.GGMLQuantizationType.F32
        yield f"blk.{i}.ffn_gate.weight", (ffn, hidden), Q8_0
        yield f"blk.{i}.ffn_up.weight", (ffn, hidden), Q8_0
        yield f"blk.{i}.ffn_down.weight", (hidden, ffn), Q8_0
    yield "output_norm.weight", (hidden,), gguf.GGMLQuantizationType.F32
    yield "output.weight", (vocab, hidden), Q8_0


def write_sparse(path: str, vocab: int, merges: int) -> int:
    """Writes the header with GGUFWriter, then extends the file over its (unwritten) data."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_context_length(2048)
    writer.add_embedding_length(2048)
    writer.add_block_count(22)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_tokenizer_model("llama" if not merges else "gpt2")
    writer.add_token_list([f"▁token{i}" for i in range(vocab)])
    writer.add_token_scores([float(-i) for i in range(vocab)])
    writer.add_token_types([1] * vocab)
    if merges:
        writer.add_token_merges([f"Ġa{i} b{i}" for i in range(merges)])
    data = 0
    for name, shape, qtype in tinyllama_tensors():
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(shape)) // block * size
        dtype = np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.uint8
        byte_shape = shape if dtype == np.float32 else (*shape[:-1], shape[-1] // block * size)
        writer.add_tensor_info(name, byte_shape, np.dtype(dtype), nbytes, raw_dtype=qtype)
        data += -(-nbytes // 32) * 32
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = os.path.getsize(path)
    total = -(-header // 32) * 32 + data
    os.truncate(path, total)  # sparse: the data section is a hole
    return total


def timed_ms(fn, repeats: int) -> tuple[float, float]:
    """(median, min) of `repeats` calls, in ms: on a shared machine the min shows the cost
    without other processes' interference, the median what a user sees."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-gguf-")
    cases = {
        "llama-2 tokenizer (32k tokens)": (32000, 0),
        "llama-3 tokenizer (128k tokens, 280k merges)": (128256, 280147),
    }
    for label, (vocab, merges) in cases.items():
        path = f"{folder}/tinyllama-{vocab}.gguf"
        size = write_sparse(path, vocab, merges)
        header = gguf_format.read(path)
        tree = inspector.load(path)  # warm: gguf imported, the file's header in the page cache
        assert len(inspector.describe(tree)) > 200
        # cold each time: `read` keeps the last headers it read (the app reads one twice)
        load_ms, load_min = timed_ms(
            lambda p=path: (gguf_format.forget(), inspector.load(p)), args.repeats
        )
        read_ms, read_min = timed_ms(
            lambda p=path: (gguf_format.forget(), gguf_format.read(p)), args.repeats
        )
        vector_min = gguf_header._VECTOR_MIN
        gguf_header._VECTOR_MIN = 1 << 62  # every string array walked string by string
        try:
            plain = gguf_format.forget(), gguf_format.read(path)
            assert plain[1] == header  # the same header either way
            plain_ms, plain_min = timed_ms(
                lambda p=path: (gguf_format.forget(), gguf_format.read(p)), args.repeats
            )
        finally:
            gguf_header._VECTOR_MIN = vector_min
        start = time.perf_counter()
        reader = gguf.GGUFReader(path)
        reader_ms = (time.perf_counter() - start) * 1e3
        assert len(reader.tensors) == len(header.tensors) == 201
        verdict = "meets" if load_ms <= TARGET_MS else "misses"
        print(
            f"{label}: file {size / 1e9:.2f} GB (sparse), {len(header.tensors)} tensors, "
            f"{len(header.metadata)} keys, header {header.data_start / 1e6:.2f} MB"
        )
        print(
            f"  inspector.load (structure): {load_ms:.1f} ms median of {args.repeats} "
            f"(min {load_min:.1f}; the median {verdict} the {TARGET_MS:.0f} ms target); "
            f"bytes read {header.bytes_read:,} ({header.bytes_read / size:.2%} of the file)"
        )
        print(
            f"  gguf_format.read (the checked header alone): {read_ms:.1f} ms median "
            f"(min {read_min:.1f}); string by string: {plain_ms:.1f} ms (min {plain_min:.1f})"
        )
        print(
            f"  gguf.GGUFReader (gguf {gguf_format._gguf_version()}, one run): "
            f"{reader_ms:.0f} ms ({reader_ms / load_ms:.0f}x)"
        )
        os.remove(path)
    os.rmdir(folder)


if __name__ == "__main__":
    main()
