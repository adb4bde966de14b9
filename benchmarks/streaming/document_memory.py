"""Peak memory of ``Encoder.document(text)`` on a long real text, beyond the model: before and after the text is
tokenized in pieces (issue 64, item 21).

    PYTHONPATH=OLD python benchmarks/streaming/document_memory.py --label before --checkpoint /tmp/ckpt --out FILE
    PYTHONPATH=.   python benchmarks/streaming/document_memory.py --label after --checkpoint /tmp/ckpt --out FILE

Each point runs in a fresh subprocess (``--child``): the model and tokenizer load and encode a short text (warm-up),
the peak RSS is reset to the RSS then (``/proc/self/clear_refs``), then ``Encoder(dir).document(text)`` and its
``vector()`` run; ``peak - base`` is what the document held beyond the weights. The checkpoint: a random Avey-B
(``presets.small``, seed 0, float32, CPU) with a byte-level BPE tokenizer of 8,192 ids trained on tiny-shakespeare
(the project's shared data), so not fitted to the text; the text: WikiText-2 valid, cycled to ``--tokens`` of that
tokenizer's tokens. The package imported is whichever ``PYTHONPATH`` names (a checkout before the change, or after).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path("/work/shared/data")  # the project's shared data
TEXT, TRAIN = DATA / "wikitext-2/valid.tokens.txt", DATA / "tinyshakespeare/input.txt"


def checkpoint(directory: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from avey_b import AveyBForSentenceEmbedding
    from avey_b.model import presets

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train([str(TRAIN)], trainers.BpeTrainer(vocab_size=8192, special_tokens=specials,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(0)
    AveyBForSentenceEmbedding(presets.small(vocab_size=len(fast), pad_token_id=fast.pad_token_id)).save_pretrained(
        directory)
    fast.save_pretrained(directory)


def text_of(tokenizer, tokens: int) -> str:
    base = TEXT.read_text(encoding="utf-8")
    per_char = len(tokenizer(base[:200_000])["input_ids"]) / 200_000
    return (base * (int(tokens / per_char / len(base)) + 1))[:int(tokens / per_char)]


def child(directory: str, tokens: int) -> dict:
    import torch

    from avey_b import Encoder, LoadOptions
    from avey_b.benchmarking.timing import status_mb

    torch.set_num_threads(2)
    encoder = Encoder(directory, LoadOptions(precision="fp32")).load()
    text = text_of(encoder.tokenizer, tokens)
    encoder.document("warm up the model and the tokenizer").vector()
    base = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak RSS starts again from the current RSS
    t0 = time.perf_counter()
    document = encoder.document(text)
    document.vector()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens": len(document), "characters": len(text), "base_mb": round(base, 1),
            "peak_above_base_mb": round(peak - base, 1), "seconds": round(seconds, 1),
            "package": str(Path(sys.modules["avey_b"].__file__).parent)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1 << 20])
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", help="reuse this checkpoint directory (made when missing)")
    parser.add_argument("--child", nargs=2, metavar=("DIR", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.checkpoint or tmp)
        if not (directory / "config.json").exists():
            checkpoint(directory)
        for n in args.tokens:
            done = subprocess.run([sys.executable, __file__, "--out", args.out, "--child", str(directory), str(n)],
                                  capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            with open("/proc/loadavg") as f:
                load = " ".join(f.read().split()[:3])
            row = {"label": args.label, "requested_tokens": n, **json.loads(done.stdout.splitlines()[-1]),
                   "load_after": load}
            print(json.dumps(row))
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
