"""The applications of the command line built on the model: serve, embed, export, quantize, convert, analyze, demo
and ablation."""
