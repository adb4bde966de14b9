"""``avey-b embed --update``: bring an output directory to a new version of its input, computing only what changed.

Per document id, against the records saved beside the shards (:mod:`avey_b.apps.embed.streamed`): an unchanged
document is *skipped* (its vectors copied); one whose text extends its old text is *appended* (its saved state fed
the new tokens: only the splits from the first changed token id on run); any other change is *edited* (the state's
changed span of ids replaced: the edited splits and the later splits whose choice they reach); a new id is
encoded (*new*), and an id no longer in the input is *removed*. Where a document cannot be encoded in pieces (the
model's config, character-span chunks) a changed one is encoded again in full. The shards are cut as a fresh run of
the new input cuts them, and hold the same vectors.

Crash safety: the new shards and records are written (each atomically) into ``OUTPUT/.update/``, never over the
old ones, which stay readable; a shard whose documents are unchanged is kept where it is. The update's manifest,
written last into ``.update/``, commits it: the staged files are then renamed into place, the old ones the new
output no longer has deleted, and the manifest replaced. A run that stops before the commit leaves the old output
as it was, and the next ``--update`` reuses the shards it staged; one that stops during the renames is finished by
the next run into OUTPUT, whatever its options (:func:`finish_switch`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from avey_b.apps.embed import embedder, shards
from avey_b.apps.embed.inputs import Document
from avey_b.apps.embed.streamed import (
    STATE_COLUMNS,
    STATE_DIR,
    Pieces,
    read_keys,
    record,
    record_fields,
    record_key,
    row_state,
    text_hash,
)
from avey_b.utils.files import load_json
from avey_b.utils.records import write_json_atomic

STAGE = ".update"
ACTIONS = ("skipped", "appended", "edited", "new", "removed")


class OldOutput:
    """What an earlier run left in OUTPUT: per document id, its shard, saved row, text hash, length and tokens (the
    shards with saved records only), read on demand a shard at a time (a few kept). ``shape``: the model's width,
    split size and ``k``."""

    def __init__(self, out: Path, shape: tuple[int, int, int], late: bool):
        import pyarrow.parquet as pq

        self.out, self.shape, self.late = out, shape, late
        # id -> (shard, row, text hash, characters, tokens: None in records written before they were saved)
        self.index: dict[str, tuple[int, int, str, int, int | None]] = {}
        for path in sorted((out / STATE_DIR).glob("part-*.parquet")):
            shard = int(path.stem.split("-")[1])
            if not (out / shards.SHARD.format(shard)).exists():
                continue
            names = ["id", "sha256", "n_chars"] + (["n_tokens"] if "n_tokens" in pq.read_schema(path).names else [])
            t = pq.read_table(path, columns=names)
            tokens = t["n_tokens"].to_pylist() if "n_tokens" in names else [None] * t.num_rows
            for row, found in enumerate(zip(t["id"].to_pylist(), t["sha256"].to_pylist(), t["n_chars"].to_pylist(),
                                            tokens, strict=True)):
                self.index[found[0]] = (shard, row, *found[1:])
        self._cache: OrderedDict = OrderedDict()

    def _table(self, kind: str, shard: int):
        import pyarrow.parquet as pq

        key = (kind, shard)
        if key not in self._cache:
            if kind == "state":
                self._cache[key] = pq.read_table(self.out / STATE_DIR / shards.SHARD.format(shard))
            else:  # the rows' places, vectors, and what a row of an unchanged document is copied with
                columns = ["id", "vector", "n_tokens", *(("chunk", "char_start", "char_end") if self.late else ())]
                t = pq.read_table(self.out / shards.SHARD.format(shard), columns=columns)
                rows: dict[str, list[int]] = {}
                for i, doc_id in enumerate(t["id"].to_pylist()):
                    rows.setdefault(doc_id, []).append(i)
                flat = t["vector"].combine_chunks()
                fields = {c: t[c].to_pylist() for c in columns[2:]}
                self._cache[key] = (rows, flat.values.to_numpy(zero_copy_only=False).reshape(len(flat), -1), fields)
            while len(self._cache) > 4:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]

    def action(self, doc: Document) -> str:
        """What the update does with ``doc``: skipped, appended, edited or new."""
        old = self.index.get(doc.id)
        if old is None:
            return "new"
        if old[2] == text_hash(doc.text, doc.spans):
            return "skipped"
        if doc.spans is None and len(doc.text) > old[3] and text_hash(doc.text[:old[3]]) == old[2]:
            return "appended"
        return "edited"

    def tokens(self, doc: Document) -> int | None:
        """The tokens of ``doc`` as recorded when its text was the same (None: changed, new, or not recorded)."""
        old = self.index.get(doc.id)
        return old[4] if old is not None and old[2] == text_hash(doc.text, doc.spans) else None

    def vectors(self, doc_id: str) -> np.ndarray | None:
        """The rows' vectors of a document as stored ((rows, d)), None when it has none (skipped then)."""
        rows, vectors, _ = self._table("vectors", self.index[doc_id][0])
        return vectors[rows[doc_id]] if doc_id in rows else None

    def rows(self, doc: Document) -> list[dict] | None:
        """The shard rows of an unchanged ``doc`` whose tokens were recorded, copied from the old shard (its text
        and kept values from ``doc``, the rest as stored; not tokenized again); None otherwise (and for a document
        the old run skipped)."""
        if self.tokens(doc) is None:
            return None
        rows, vectors, fields = self._table("vectors", self.index[doc.id][0])
        if doc.id not in rows:
            return None
        out = []
        for i in rows[doc.id]:
            row = {"id": doc.id, "doc": doc, "vector": vectors[i], "text": doc.text,
                   **{c: values[i] for c, values in fields.items()}}
            if self.late:
                row["text"] = doc.text[row["char_start"]:row["char_end"]]
            out.append(row)
        return out

    def saved(self, doc_id: str) -> tuple[dict, dict | None]:
        """A document's saved row (as :func:`~avey_b.apps.embed.streamed.record` makes it) and its state's
        tensors (None: no state)."""
        shard, row = self.index[doc_id][:2]
        table = self._table("state", shard)
        data = {name: table[name][row].as_py() for name in ("id", "sha256", "n_chars", "kept_sha256")}
        for name in STATE_COLUMNS:  # a column a record written before it existed lacks is stored empty
            data[name] = (table[name][row].values.to_numpy(zero_copy_only=False).copy() if name in
                          table.column_names else np.zeros(0, STATE_COLUMNS[name]))
        return data, row_state(table, row, self.shape, self.late)


def write_records(path: Path, rows: list[dict], info: dict) -> None:
    """Write one shard's saved rows atomically, ``info`` (what the update did) in its metadata."""
    import pyarrow as pa

    from avey_b.apps.embed import shards

    columns = {"id": pa.array([r["id"] for r in rows], pa.string()),
               "sha256": pa.array([r["sha256"] for r in rows], pa.string()),
               "n_chars": pa.array([r["n_chars"] for r in rows], pa.int64()),
               "kept_sha256": pa.array([r["kept_sha256"] for r in rows], pa.string()),
               "n_tokens": pa.array([r["n_tokens"] for r in rows], pa.int64())}
    for name, typ in STATE_COLUMNS.items():
        arrays = [r[name] for r in rows]
        offsets = np.concatenate([[0], np.cumsum([a.size for a in arrays])]).astype(np.int64)
        values = np.concatenate(arrays) if arrays else np.zeros(0, typ)
        columns[name] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values.astype(typ)))
    table = pa.table(columns).replace_schema_metadata({shards.METADATA_KEY: json.dumps(info).encode()})
    shards.write_shard(path, table)


def stage_dir(out: Path, settings: shards.Settings) -> Path:
    """``OUTPUT/.update/``, kept from an update that stopped with the same settings, else made anew."""
    stage = out / STAGE
    if stage.exists() and (not (stage / "_settings.json").exists()
                           or load_json(stage / "_settings.json") != settings.to_json()):
        shutil.rmtree(stage)
    (stage / STATE_DIR).mkdir(parents=True, exist_ok=True)
    for stale in [*stage.glob(".*.tmp"), *(stage / STATE_DIR).glob(".*.tmp")]:
        stale.unlink()
    write_json_atomic(stage / "_settings.json", settings.to_json())
    return stage


def finish_switch(out: Path) -> bool:
    """Put a committed update in place (its manifest staged: renames the staged shards and records over the old
    ones, deletes those the new output no longer has, then the manifest); idempotent. True when there was one."""
    stage = out / STAGE
    if not (stage / shards.MANIFEST).exists():
        return False
    manifest = load_json(stage / shards.MANIFEST)
    keep = {s["file"] for s in manifest["shards"]}
    (out / STATE_DIR).mkdir(exist_ok=True)
    for path in sorted(stage.glob("part-*.parquet")):
        os.replace(path, out / path.name)
    for path in sorted((stage / STATE_DIR).glob("part-*.parquet")):
        os.replace(path, out / STATE_DIR / path.name)
    for path in [*out.glob("part-*.parquet"), *(out / STATE_DIR).glob("part-*.parquet")]:
        if path.name not in keep:
            path.unlink()
    os.replace(stage / shards.MANIFEST, out / shards.MANIFEST)
    shutil.rmtree(stage)
    return True


class Updater:
    """One update's shards: each found (staged by an update that stopped, or unchanged where it is) or computed
    into the stage, with its saved records; counts the actions and the tokens run through the model."""

    def __init__(self, encoder, settings: shards.Settings, out: Path, max_batch_tokens: int):
        self.encoder, self.settings, self.out, self.max_batch_tokens = encoder, settings, out, max_batch_tokens
        self.pieces = Pieces(encoder, settings)
        config = encoder.config
        k = 0 if config.ranker == "off" else config.num_retrieved_splits
        self.old = OldOutput(out, (config.hidden_size, config.split_size, k), self.pieces.late)
        self.stage = stage_dir(out, settings)
        self.actions: Counter = Counter()
        self.tokens = Counter()  # computed (by this run), staged (by the update that stopped), total
        self.shards = Counter()  # written, found staged, kept

    def count_tokens(self, docs: list[Document]) -> list[int]:
        """The tokens of each of ``docs`` (special tokens included: what shards are cut by): as recorded for an
        unchanged document, the others tokenized."""
        counts = [self.old.tokens(d) for d in docs]
        todo = [i for i, n in enumerate(counts) if n is None]
        if todo:
            found = self.encoder.tokenize([docs[i].text for i in todo])["input_ids"]
            for i, ids in zip(todo, found, strict=True):
                counts[i] = len(ids)
        return counts

    def shard(self, k: int, group: list[Document], kept_schema) -> dict:
        """Shard ``k`` of the new input: found, or computed and staged; returns its metadata."""
        name, keys = shards.SHARD.format(k), [record_key(d) for d in group]
        for where, kind in ((self.stage, "staged"), (self.out, "kept")):
            if (where / name).exists() and (where / STATE_DIR / name).exists() and \
                    read_keys(where / STATE_DIR / name) == keys:
                info = shards.found_shard(where / name, group)
                done = shards.shard_info(where / STATE_DIR / name) if kind == "staged" else {
                    "actions": {"skipped": len(group)}, "tokens_computed": 0}
                if kind == "kept":  # a shard staged from other documents (an hf: dataset that changed) goes
                    for stale in (self.stage / name, self.stage / STATE_DIR / name):
                        stale.unlink(missing_ok=True)
                self.shards[kind] += 1
                self._count(done, info, "staged" if kind == "staged" else "computed")
                return info
        info = self._compute(k, group, kept_schema)
        self.shards["written"] += 1
        return info

    def _count(self, done: dict, info: dict, by: str = "computed") -> None:
        self.actions.update(done["actions"])
        self.tokens.update({by: done["tokens_computed"], "total": info["tokens"]})

    def _compute(self, k: int, group: list[Document], kept_schema) -> dict:
        """Shard ``k``: an unchanged document's rows and record copied (not tokenized, no model), a changed one
        computed from its saved state, a new one (or one the model cannot take in pieces) encoded whole."""
        late = self.settings.chunking == "late"
        actions = {d.id: self.old.action(d) for d in group}
        copied = {d.id: rows for d in group if actions[d.id] == "skipped" and (rows := self.old.rows(d)) is not None}
        work, skipped = embedder.prepare_shard(self.encoder, [d for d in group if d.id not in copied], self.settings)
        # each document's tokens, once: recorded (copied), tokenized (work) or counted when too long (skipped)
        tokens = ({d.id: self.old.tokens(d) for d in group if d.id in copied}
                  | {s["id"]: s["n_tokens"] for s in skipped} | {doc.id: len(ids) for doc, ids, _ in work})
        vectors, states, computed = [None] * len(work), {}, 0
        for d in group:
            if d.id in copied:
                states[d.id] = {**self.old.saved(d.id)[0], **record_fields(d, tokens[d.id])}
        for i, (doc, ids, ranges) in enumerate(work):
            action = actions[doc.id]
            saved, tensors = self.old.saved(doc.id) if action != "new" else (None, None)
            if action == "skipped" and (v := self.old.vectors(doc.id)) is not None \
                    and len(v) == (len(ranges) if late else 1):  # a record without its tokens: tokenized
                vectors[i], states[doc.id] = (v if late else v[0]), {**saved, **record_fields(doc, len(ids))}
                continue
            if self.pieces.why_not is None and (done := self.pieces.encode(ids, ranges, tensors)) is not None:
                vectors[i], state, n = done
                states[doc.id] = record(doc, len(ids), state)
                computed += n
        whole = [i for i, v in enumerate(vectors) if v is None]
        found = embedder.embed_whole(self.encoder, [work[i] for i in whole], late, self.max_batch_tokens)["dense"]
        for i, v in zip(whole, found, strict=True):  # dense only: --update refuses the other outputs
            vectors[i] = v
            computed += len(work[i][1])
        records = [states.get(d.id) or record(d, tokens[d.id], None) for d in group]
        done = {"actions": dict(Counter(actions.values())), "tokens_computed": computed}
        write_records(self.stage / STATE_DIR / shards.SHARD.format(k), records, done)
        made = {item[0].id: embedder.shard_rows([item], {"dense": [v]}, late)
                for item, v in zip(work, vectors, strict=True)}
        table_rows = [row for d in group for row in copied.get(d.id, made.get(d.id, []))]
        info = {"shard": k, "documents": len(group), "first_id": group[0].id, "last_id": group[-1].id,
                "rows": len(table_rows), "skipped": skipped,
                "tokens": sum(len(ids) for _, ids, _ in work) + sum(tokens[i] for i in copied)}
        table = shards.table_of(table_rows, self.settings, {"dense": self.encoder.config.hidden_size}, info,
                                  kept_schema)
        shards.write_shard(self.stage / shards.SHARD.format(k), table)
        self._count(done, info)
        return info

    def record(self, seen: set[str]) -> dict:
        """What the update did, for the run's record in the manifest: ``tokens_computed`` by this run, and
        ``tokens_computed_staged`` by an update that stopped before its commit (its shards found staged)."""
        self.actions["removed"] = len(set(self.old.index) - seen)
        return {"documents": {a: self.actions.get(a, 0) for a in ACTIONS},
                "tokens_computed": self.tokens["computed"], "tokens_computed_staged": self.tokens["staged"],
                "tokens_total": self.tokens["total"],
                "shards": {"written": self.shards["written"], "found_staged": self.shards["staged"],
                           "kept": self.shards["kept"]},
                "changed_documents": "computed in pieces" if self.pieces.why_not is None else
                f"encoded again in full: {self.pieces.why_not}"}


def state_sizes(out: Path) -> dict:
    """The bytes of the saved records and of the shards in ``out``."""
    return {"bytes": sum(p.stat().st_size for p in (out / STATE_DIR).glob("part-*.parquet")),
            "shard_bytes": sum(p.stat().st_size for p in out.glob("part-*.parquet")), "directory": STATE_DIR}


def put_in_place(out: Path, manifest: dict) -> None:
    """After the commit (the update's manifest written into the stage): the staged files in place
    (:func:`finish_switch`), and the manifest completed with the saved records' size."""
    finish_switch(out)
    manifest["state"] = state_sizes(out)
    write_json_atomic(out / shards.MANIFEST, manifest)
