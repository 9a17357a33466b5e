"""Write a GGUF file's weights dequantised to F32 into a new GGUF file (same metadata).

Usage: gguf_dequant.py IN.gguf OUT.gguf

Uses llama.cpp's `gguf` package: its dequantize() (bit-identical to ggml's
dequantize_row_*) and its writer. llama.cpp computes such a file without
rounding activations (its F32 products are float32), so flywheel and llama.cpp
can be held to the same numbers on it (.ci/gguf.sh).
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.fields["general.architecture"].contents())
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type", "general.quantization_version"):
            continue
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(key, f.contents(), vtype)
    w.add_file_type(0)  # ALL_F32
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        w.add_tensor(t.name, dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
