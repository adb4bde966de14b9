"""Train the byte-level BPE used by the CPU NIAH runs (8,192 tokens, on WikiText-2 validation text).

No pretrained tokenizer can be downloaded on the machine these results were recorded on, so the NIAH
lengths here are counted in the tokens of this tokenizer. For paper-comparable sets, pass the model's own
tokenizer to `avey-b niah generate --tokenizer` instead. Usage: python make_tokenizer.py TEXT_FILE OUT_DIR
"""

import sys

from avey_b.data.tokenization import train_bpe_tokenizer


def main(text_file: str, out_dir: str) -> None:
    with open(text_file, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    tok = train_bpe_tokenizer(lines, vocab_size=8192)
    tok.save_pretrained(out_dir)
    print(f"{out_dir}: {len(tok)} tokens")


if __name__ == "__main__":
    main(*sys.argv[1:])
