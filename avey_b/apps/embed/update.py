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
    """What an earlier run left in OUTPUT: per document id, its shard, saved row, text hash and length (the
    shards with saved records only), read on demand a shard at a time (a few kept)."""

    def __init__(self, out: Path, d: int, k: int, late: bool):
        import pyarrow.parquet as pq

        self.out, self.d, self.k, self.late = out, d, k, late
        self.index: dict[str, tuple[int, int, str, int]] = {}  # id -> (shard, row, text hash, characters)
        self.keys: dict[int, list] = {}
        for path in sorted((out / STATE_DIR).glob("part-*.parquet")):
            shard = int(path.stem.split("-")[1])
            if not (out / shards.SHARD.format(shard)).exists():
                continue
            t = pq.read_table(path, columns=["id", "sha256", "n_chars", "kept_sha256"])
            ids, hashes, chars = t["id"].to_pylist(), t["sha256"].to_pylist(), t["n_chars"].to_pylist()
            self.keys[shard] = list(zip(ids, hashes, t["kept_sha256"].to_pylist(), strict=True))
            for row, (doc_id, h, n) in enumerate(zip(ids, hashes, chars, strict=True)):
                self.index[doc_id] = (shard, row, h, n)
        self._cache: OrderedDict = OrderedDict()

    def _table(self, kind: str, shard: int):
        import pyarrow.parquet as pq

        key = (kind, shard)
        if key not in self._cache:
            if kind == "state":
                self._cache[key] = pq.read_table(self.out / STATE_DIR / shards.SHARD.format(shard))
            else:
                t = pq.read_table(self.out / shards.SHARD.format(shard), columns=["id", "vector"])
                rows: dict[str, list[int]] = {}
                for i, doc_id in enumerate(t["id"].to_pylist()):
                    rows.setdefault(doc_id, []).append(i)
                flat = t["vector"].combine_chunks()
                self._cache[key] = (rows, flat.values.to_numpy(zero_copy_only=False).reshape(len(flat), -1))
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

    def vectors(self, doc_id: str) -> np.ndarray | None:
        """The rows' vectors of a document as stored ((rows, d)), None when it has none (skipped then)."""
        rows, vectors = self._table("vectors", self.index[doc_id][0])
        return vectors[rows[doc_id]] if doc_id in rows else None

    def saved(self, doc_id: str) -> tuple[dict, dict | None]:
        """A document's saved row (as :func:`~avey_b.apps.embed.streamed.record` makes it) and its state's
        tensors (None: no state)."""
        shard, row = self.index[doc_id][:2]
        table = self._table("state", shard)
        data = {name: table[name][row].as_py() for name in ("id", "sha256", "n_chars", "kept_sha256")}
        for name in table.column_names[4:]:
            data[name] = table[name][row].values.to_numpy(zero_copy_only=False).copy()
        return data, row_state(table, row, self.d, self.k, self.late)


def write_records(path: Path, rows: list[dict], info: dict) -> None:
    """Write one shard's saved rows atomically, ``info`` (what the update did) in its metadata."""
    import pyarrow as pa

    from avey_b.apps.embed import shards

    columns = {"id": pa.array([r["id"] for r in rows], pa.string()),
               "sha256": pa.array([r["sha256"] for r in rows], pa.string()),
               "n_chars": pa.array([r["n_chars"] for r in rows], pa.int64()),
               "kept_sha256": pa.array([r["kept_sha256"] for r in rows], pa.string())}
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
        self.old = OldOutput(out, config.hidden_size, k, self.pieces.late)
        self.stage = stage_dir(out, settings)
        self.actions: Counter = Counter()
        self.tokens = Counter()  # computed, total
        self.shards = Counter()  # written, found staged, kept

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
                self._count(done, info)
                return info
        info = self._compute(k, group, kept_schema)
        self.shards["written"] += 1
        return info

    def _count(self, done: dict, info: dict) -> None:
        self.actions.update(done["actions"])
        self.tokens.update(computed=done["tokens_computed"], total=info["tokens"])

    def _compute(self, k: int, group: list[Document], kept_schema) -> dict:
        late = self.settings.chunking == "late"
        work, skipped = embedder.prepare_shard(self.encoder, group, self.settings)
        vectors, states, computed = [None] * len(work), {}, 0
        actions = Counter(self.old.action(d) for d in group)
        for i, (doc, ids, ranges) in enumerate(work):
            action = self.old.action(doc)
            saved, tensors = self.old.saved(doc.id) if action != "new" else (None, None)
            if action == "skipped" and (v := self.old.vectors(doc.id)) is not None \
                    and len(v) == (len(ranges) if late else 1):
                vectors[i], states[doc.id] = (v if late else v[0]), {**saved, **record_fields(doc)}
                continue
            if self.pieces.why_not is None and (done := self.pieces.encode(ids, ranges, tensors)) is not None:
                vectors[i], state, n = done
                states[doc.id] = record(doc, state)
                computed += n
        whole = [i for i, v in enumerate(vectors) if v is None]
        found = embedder.embed_whole(self.encoder, [work[i] for i in whole], late, self.max_batch_tokens)["dense"]
        for i, v in zip(whole, found, strict=True):  # dense only: --update refuses the other outputs
            vectors[i] = v
            computed += len(work[i][1])
        rows = [states.get(d.id) or record(d, None) for d in group]
        done = {"actions": dict(actions), "tokens_computed": computed}
        write_records(self.stage / STATE_DIR / shards.SHARD.format(k), rows, done)
        info = {"shard": k, "documents": len(group), "first_id": group[0].id, "last_id": group[-1].id,
                "rows": 0, "tokens": sum(len(ids) for _, ids, _ in work), "skipped": skipped}
        table_rows = embedder.shard_rows(work, {"dense": vectors}, late)
        info["rows"] = len(table_rows)
        table = shards.table_of(table_rows, self.settings, {"dense": self.encoder.config.hidden_size}, info,
                                  kept_schema)
        shards.write_shard(self.stage / shards.SHARD.format(k), table)
        self._count(done, info)
        return info

    def record(self, seen: set[str]) -> dict:
        """What the update did, for the run's record in the manifest."""
        self.actions["removed"] = len(set(self.old.index) - seen)
        return {"documents": {a: self.actions.get(a, 0) for a in ACTIONS},
                "tokens_computed": self.tokens["computed"], "tokens_total": self.tokens["total"],
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
