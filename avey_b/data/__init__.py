"""Data for masked-LM pretraining: corpora (``corpus``), tokenizers (``tokenizer``), packing and sharding
(``packing``) and masking (``mlm``). Nothing here imports the model."""
