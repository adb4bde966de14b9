"""Fill in masked words with the authors' released Avey-B (or any saved Avey-B masked-LM).

    python examples/fill_mask.py                      # avey-ai/avey-b1-base-exp from the Hugging Face Hub
    python examples/fill_mask.py --model runs/quickstart/model   # offline: the directory holds its tokenizer
    python examples/fill_mask.py --small              # a tiny random model, no download (outputs mean nothing)
"""

import argparse
import os

from transformers import AutoModelForMaskedLM, pipeline

import avey_b  # noqa: F401  (registers Avey-B with the transformers Auto classes)
from avey_b.data.tokenization import RELEASE_TOKENIZER, load_tokenizer

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", default="avey-ai/avey-b1-base-exp", help="a Hub id or a local directory")
parser.add_argument("--tokenizer", help="default: the model directory's own (this library saves it beside the model), "
                    f"else the release's {RELEASE_TOKENIZER} (the authors ship it apart from the checkpoints)")
parser.add_argument("--small", action="store_true", help="a tiny random model built here instead")
args = parser.parse_args()

if args.small:
    from _small import tiny_model

    args.model = tiny_model()
if args.tokenizer is None:
    has_own = os.path.isfile(os.path.join(args.model, "tokenizer_config.json"))
    args.tokenizer = args.model if has_own else RELEASE_TOKENIZER

model = AutoModelForMaskedLM.from_pretrained(args.model)
# The release's tokenizer has no mask token; load_tokenizer adds <|mask|> (and pad/cls/sep) and pads the
# vocabulary to the model's size, as the authors' evaluation does.
tokenizer = load_tokenizer(args.tokenizer, vocab_size=model.config.vocab_size)
fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)

for text in [f"The capital of France is {tokenizer.mask_token}.",
             f"She played the {tokenizer.mask_token} at the concert last night."]:
    guesses = fill(text, top_k=5)
    print(text, "->", " | ".join(f"{g['token_str'].strip()} ({g['score']:.2f})" for g in guesses))
