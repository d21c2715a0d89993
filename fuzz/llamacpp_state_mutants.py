#!/usr/bin/env python3
"""Writes the state fuzzer's llama.cpp seeds that reach llama.cpp's own
refusals: each is a whole state of the corpus, llamacpp_whole.bin (engine
byte 2: one KV stream per sequence) or llamacpp_unified_whole.bin (byte 3:
kv_unified=1), that is the fuzzer's byte, the plugin's KVLS header, then
llama_state_seq_get_data's bytes, with one field of llama.cpp's sequence
state set wrong. The layout, as the pinned b11434 writes it (state
version 4; src/llama-context.cpp state_seq_get_data, src/llama-kv-cache.cpp
state_write, state_write_meta, state_write_data): u32 magic, i32 seq_id,
u32 n_stream, then per stream u32 cell_count and, where not 0, per cell
i32 pos, u32 n_seq_id, n_seq_id i32 seq ids; u32 v_trans, u32 n_layer,
u32 n_rot_k, u32 n_rot_v (version 4: 0 for an unrotated cache); per
layer i32 k type, u64 k row size, the rows; per layer the V (transposed:
i32 type, u32 element size, u32 n_embd_v_gqa, the columns).

    fuzz/llamacpp_state_mutants.py [CORPUS_DIR]   (default fuzz/corpus/state_fuzzer)
"""
import os
import struct
import sys

HEADER = 1 + 16  # the fuzzer's engine byte, then the plugin's header


def fields(b):
    """Offsets of the fields the mutants change, read off the whole state."""
    at = {}
    o = HEADER
    at["magic"] = o
    o += 8
    at["n_stream"] = o
    (n_stream,) = struct.unpack_from("<I", b, o)
    o += 4
    for _ in range(n_stream):
        (cells,) = struct.unpack_from("<I", b, o)
        if cells == 0:
            o += 4
            continue
        at["cell_count"] = o
        o += 4
        at["n_seq_id"] = o + 4
        for _ in range(cells):
            (_, n_seq_id) = struct.unpack_from("<iI", b, o)
            o += 8 + 4 * n_seq_id
        at["v_trans"], at["n_layer"], at["n_rot_k"] = o, o + 4, o + 8
        (v_trans, n_layer) = struct.unpack_from("<II", b, o)
        o += 16
        at["k_type"], at["k_row"] = o, o + 4
        for _ in range(n_layer):
            (_, row) = struct.unpack_from("<iQ", b, o)
            o += 12 + cells * row
        assert v_trans == 1, "the corpus state has V transposed (as llama.cpp without flash attention)"
        at["v_type"], at["v_size_el"], at["v_gqa"] = o, o + 4, o + 8
        at["end"] = len(b)
    return at


def write_mutants(corpus, base, prefix):
    whole = open(os.path.join(corpus, base), "rb").read()
    at = fields(whole)

    def put(name, fmt, offset, value):
        b = bytearray(whole)
        struct.pack_into(fmt, b, offset, value)
        open(os.path.join(corpus, f"{prefix}_{name}.bin"), "wb").write(bytes(b))

    put("wrong_magic", "<I", at["magic"], 0x12345678)  # "wrong sequence state magic"
    put("stream_count", "<I", at["n_stream"], 3)  # "n_stream mismatch"
    put("too_many_cells", "<I", at["cell_count"], 4096)  # "not enough cells in kv cache"
    put("two_seqs_in_a_cell", "<I", at["n_seq_id"], 2)  # "invalid seq_id-agnostic kv cell"
    put("layer_count", "<I", at["n_layer"], 7)  # "mismatched layer count"
    put("v_not_transposed", "<I", at["v_trans"], 0)  # "incompatible V transposition"
    put("rotation", "<I", at["n_rot_k"], 64)  # v4: a K rotation this cache does not have
    put("key_type", "<i", at["k_type"], 8)  # "mismatched key type"
    put("key_row_size", "<Q", at["k_row"], 12345)  # "mismatched key row size"
    put("value_type", "<i", at["v_type"], 8)  # "mismatched value type"
    put("value_element_size", "<I", at["v_size_el"], 3)  # "mismatched value element size"
    put("value_gqa", "<I", at["v_gqa"], 5)  # "mismatched GQA embedding size"
    # Cut inside the keys' rows: the read runs past the end.
    open(os.path.join(corpus, f"{prefix}_cut_in_keys.bin"), "wb").write(whole[: at["k_row"] + 8 + 40])


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "state_fuzzer")
    write_mutants(corpus, "llamacpp_whole.bin", "llamacpp")
    write_mutants(corpus, "llamacpp_unified_whole.bin", "llamacpp_unified")


if __name__ == "__main__":
    main()
