"""Export an Avey-B embedding model to ONNX, quantize it to int8, and compare the three runtimes on one input:
vectors (cosine with the eager model) and time.

    python examples/export_int8.py --model runs/quickstart/model --out runs/quickstart/export
    python examples/export_int8.py --small

The same as ``avey-b export MODEL OUT --head embedding --quantize int8``; ``avey-b serve OUT --onnx
OUT/onnx/model.int8.onnx`` then serves the int8 model.
"""

import argparse
import tempfile
import time

import torch

from avey_b import Encoder, LoadOptions
from avey_b.apps.export import export
from avey_b.apps.export_options import ExportOptions

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="runs/quickstart/model", help="a saved Avey-B with its tokenizer")
parser.add_argument("--out", help="the directory to write (default: a temporary one)")
parser.add_argument("--small", action="store_true", help="a tiny random model built here instead")
args = parser.parse_args()

if args.small:
    from _small import tiny_model

    args.model = tiny_model()
out = args.out or tempfile.mkdtemp(prefix="avey-b-export-")
export(args.model, out, ExportOptions(head="embedding", quantize="int8"))  # checks both against the eager model

text = " ".join(["The film was good and the cast met in Paris."] * 60)
runtimes = {"eager fp32": LoadOptions(precision="fp32"), "onnx fp32": LoadOptions(onnx=f"{out}/onnx/model.onnx"),
            "onnx int8": LoadOptions(onnx=f"{out}/onnx/model.int8.onnx")}
vectors = {}
for name, options in runtimes.items():
    encoder = Encoder(out, options)
    batch, mask = encoder.pad(encoder.tokenize([text])["input_ids"])
    encoder.embed(batch, mask)  # warm-up
    start = time.perf_counter()
    vectors[name] = encoder.embed(batch, mask)[0].cpu()
    print(f"{name:>10}: {1000 * (time.perf_counter() - start):7.1f} ms for {batch.shape[1]:,} tokens, cosine with "
          f"eager {torch.cosine_similarity(vectors[name], vectors['eager fp32'], 0):.4f}")
