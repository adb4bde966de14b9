"""``avey-b embed MODEL INPUT OUTPUT``: embed a corpus into Parquet shards, resumably — one vector per document, or
one per chunk with late chunking — with the ids, text and columns a vector database takes beside them.

    avey-b embed runs/quickstart/model corpus/ vectors/
    avey-b embed MODEL docs.jsonl vectors/ --keep-columns source,url --with-text --chunking late --chunk-tokens 256
    python -c "import pyarrow.parquet as pq; print(pq.read_table('vectors').to_pandas())"

Input: a ``.txt`` file (one document, or one per non-blank line with ``--lines``), a ``.jsonl`` or ``.parquet``
file (the ``--text-column``), a directory of such files (searched recursively, in sorted order), or ``hf:NAME``
(a Hugging Face dataset, streamed; ``--hf-config``, ``--hf-split``).

Ids: the ``id`` field of rows that have one (JSON lines, Parquet, ``hf:``), or the field ``--id-column`` names;
ids must be unique: a repeated one stops the job with an error naming where it was read and where first. A file
(or ``hf:`` dataset) whose first row has no ``id`` gets ids made up from where each document was read, and then no
later row may have an ``id``: ``<file>:<line>`` (JSON lines, and text with ``--lines``; lines count from 1),
``<file>:<row>`` (Parquet; rows count from 0), ``<file>`` (a whole text file) and ``<split>:<row>`` (``hf:``), where
``<file>`` is the path relative to a directory INPUT, or the file's name. Local input with columns is read whole
once before the first shard, so that a bad row, a missing column or a repeated id stops the job before anything is
written (``hf:`` input is checked as it streams).

Output: OUTPUT holds ``part-00000.parquet``, ... in input order; columns ``id``, with late chunking ``chunk``,
``char_start``, ``char_end`` (one row per chunk; ``n_tokens`` is then the chunk's), ``n_tokens``, ``text`` with
``--with-text`` (the document's text, or the chunk's: its characters ``[char_start, char_end)``), the columns of
``--keep-columns a,b,c`` (input fields carried beside the vectors, repeated on each chunk's row: a source, offsets,
metadata, any value pyarrow stores — a Parquet column keeps its type, JSON values take the one type pyarrow infers
over all rows, a null stays null; a row without one is an error naming the column and the file and line), and
``vector`` (``--dtype`` float32 or float16; ``--outputs`` names what is stored: ``dense``, the default, is
``vector``; ``sparse`` adds ``sparse_indices`` and ``sparse_values``, a masked-LM's SPLADE weights; ``multivector``
adds ``multivector``, a multi-vector model's token vectors as a list of fixed-size vectors per row, one per token,
special tokens included; every output from one forward, each document whole, and not with ``--update`` or late
chunking) — and ``_manifest.json``: the model and the SHA-256 of its files,
every setting, counts, run times, and every skipped document with its length (``pyarrow.parquet.read_table(OUTPUT)``
reads the shards; names starting with ``_`` or ``.`` are not data).

Shards: consecutive documents of at most ``--shard-tokens`` tokens in all (default 32,768, one full batch of the
default ``--max-batch-tokens``; a document longer than that is a shard alone), and at most ``--shard-size``
documents when given. A shard is the unit a kill can lose, so its size in tokens bounds the work lost whatever the
documents' lengths; the faster the device, the more tokens a shard may hold for the same loss, and a larger
``--shard-tokens`` (say 1,000,000) makes fewer, larger files (what a shard costs in time: ``benchmarks/embed/``).

Resume: each shard is written atomically (a hidden temporary file, then a rename), so a killed job loses at most
the shard in flight; the same command again skips the finished shards. Run with other settings (model or
tokenizer files, input contents, columns, chunking, dtype, shard sizes, ``--max-tokens``, precision) into the same
OUTPUT, it stops with an error that names each difference: vectors of two settings never share a directory.
Options left out take, on a rerun, what the first run used (``--max-tokens``, ``--shard-tokens``, ``--shard-size``).

Batching: each shard's documents are sorted by length and cut into batches of at most ``--max-batch-tokens``
padded tokens (``avey-b serve``'s rule, :mod:`avey_b.utils.batching`). A document is never cut: one longer than
``--max-tokens`` (default: what memory allows, as ``avey-b serve`` computes it) is skipped and listed in the
manifest with its length. Precision follows the library's policy (bf16 autocast where the device multiplies bf16
natively, float32 elsewhere; ``--precision``).

Vectors: every Avey-B checkpoint embeds (an embedding model, a masked-LM, a bare backbone): the masked mean of
the backbone's last hidden state over the document's tokens, L2-normalized when the checkpoint's config says
``normalize_embeddings`` (True by default) — exactly ``AveyBForSentenceEmbedding``'s ``pooler_output``, and what
``avey-b serve`` answers. Late chunking (``--chunking late``): one forward over the whole document, then one
vector per chunk, the mean of the chunk's token states normalized the same way
(:meth:`avey_b.AveyBForSentenceEmbedding.encode_chunks`); chunks are ``--chunk-tokens`` consecutive text tokens
(special tokens such as [CLS] belong to no chunk), consecutive chunks sharing ``--chunk-overlap`` tokens (each
starts ``chunk_tokens - chunk_overlap`` tokens after the previous one), or the character spans of
``--chunk-spans-column`` (a list of ``[start, end)`` pairs per document, which may overlap; a span takes the tokens
that start inside it). Every chunk's vector pools token states of the same forward over the whole document, so each
token's state already saw the text on both sides of any chunk boundary: unlike chunks embedded one by one, overlap
brings no context a chunk would otherwise miss; it only changes which token states each chunk averages (a sentence
cut by a boundary is whole in one of two overlapping chunks, at the cost of more rows).

Sparse and token vectors (``--outputs dense,sparse``, ``dense,multivector``; without ``dense`` no ``vector``): a
masked-LM checkpoint's SPLADE weights (:mod:`avey_b.model.sparse`, ``Encoder.sparse``), stored as two list columns,
``sparse_indices`` (int32 vocabulary ids, ascending) and ``sparse_values`` (float32), and a multi-vector model's
token vectors (``multivector``), one document per row. Each document runs in one forward that gives every output
(``Encoder.vectors``; up to ``--max-tokens``, never in pieces), the SPLADE max over its tokens taken chunk by chunk
through the masked-LM head so its ``(N, V)`` logits never exist at once. Not with ``--chunking late`` or
``--update`` (refused); a model without the head an output needs is refused before anything is written.

Update (``--update``): bring OUTPUT to a new version of INPUT, by document id. An unchanged document is skipped (its
vectors kept); one whose text extends its old text computes only the appended part, and an edited one only the
splits the edit reaches (the document's saved state, :class:`avey_b.model.streaming.DocumentState`, fed the new
token ids from the first that changed); a new id is encoded, an id no longer in INPUT dropped. The shards are a
fresh run's of the new INPUT, with its vectors. Each document's state (its ids and, per split, its output sum,
top-k choice and ranking keys; never token states) and its text's hash are saved in ``OUTPUT/_state/``, one file
per shard; the manifest records their size and what the update did (``runs[-1]["update"]``). On a new OUTPUT,
``--update`` is a fresh run that saves the states. A model whose splits depend on later ones (a bidirectional
ranker, the ranker at every layer) or character-span chunks re-encode a changed document in full, as the start
line says. An update writes into ``OUTPUT/.update/`` and switches in after its manifest is written there
(:mod:`avey_b.apps.embed.update`): a crash leaves the old output as it was, and the next ``--update`` reuses what
it wrote. The local backend only.

Long documents: one longer than ``--long-document-tokens`` (default 32,768) is encoded in pieces
(:mod:`avey_b.apps.embed.streamed`), in memory bounded whatever its length (the same vectors), where the model
allows it; the start line says so.

Ray (``--backend ray``, ``pip install 'avey-b[ray]'``): the same job as a Ray Data pipeline on a cluster
(``--ray-address auto``, or an address) or a local Ray: this process reads the input in order, in waves of
``--ray-wave`` (default 8) shards per actor; ``map_batches`` hands each shard to one of ``--concurrency``
actors that load the model once (``--num-gpus`` each; default 1 where the cluster has GPUs) and write the shard
into OUTPUT, which must be a filesystem every node sees (and ``avey_b`` installed on every node). Same layout,
manifest, resume and vectors as the default backend, which never imports Ray; every option above applies (the
driver reads the input, cuts the shards and fixes the kept columns' types; the actors embed and write).

Python: ``embed_corpus(MODEL, INPUT, OUTPUT, EmbedOptions(chunking="late", chunk_tokens=256, keep_columns=("url",)))``
runs the same job (:class:`avey_b.apps.embed.options.EmbedOptions`: one field per flag) and returns the manifest.
"""

# The modules, by concern: inputs (documents in: the files, rows, ids and chunk spans), embedder (the compute: from a
# shard's documents to its rows through the model; late chunks' ranges: avey_b.inference.chunks), shards (the storage:
# Parquet shards, the manifest, resume and the rerun check), streamed (documents in pieces, saved states), update
# (--update), ray (the Ray backend) and job (the job and the command's runner). This package imports them
# when one of their names is first asked for, so that ``avey-b embed --help`` (which shows this docstring) imports
# no torch.

import importlib

_EXPORTS = {
    "Document": "inputs", "read_documents": "inputs", "count_documents": "inputs",
    "encoder_for": "embedder", "embed_ids": "embedder", "local_model_dir": "embedder",
    "MANIFEST": "shards", "SHARD": "shards", "Settings": "shards", "run_shard": "embedder",
    "EmbedOptions": "job", "embed_corpus": "job", "run": "job",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
