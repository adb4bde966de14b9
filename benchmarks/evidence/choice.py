"""Does the ranker's choice find the evidence? The split choice of a query placed after a long document, measured.

Avey-B's ranker (§3.1) gives each split the ``k`` earlier splits of highest MaxSim on the *token embeddings*:
``MaxSim(q, j) = Σ_{t∈q} max_{u∈j} cos(E_t, E_u)``. A query placed after a document chooses ``k`` of the document's
splits that way, before any layer runs; this script asks whether those splits hold the answer.

Documents: WikiText-2 validation articles, their heading lines removed, concatenated in file order and cut at
article boundaries into documents of ``--sizes`` tokens each (tokenized by the model's own tokenizer, without
special tokens; a document's last article is cut at its end, and the sections cut off are not asked). The validation
set has about 300K such tokens with the quickstart tokenizer: the last document of each size (and the only one at
1M) is filled up after its articles with other real text from the shared data folder (tiny-shakespeare, then SST-2
sentences, then CoNLL-2003 sentences), which holds no answer but competes for the choice.

Queries: each level-2 section heading of the articles in the document (``= = Reception = =``) whose text is unique
among the document's headings and is not ``<unk>``; its answer span is that section's body (subsections included),
from the heading to the next level-2 heading or the end of its article. Two forms: the heading alone (``heading``),
and the article's title and the heading (``title+heading``: "Homarus gammarus Description").

Choosers, each taking the top ``k`` of the document's splits of ``S`` tokens (the model's ``split_size``) for the
query's tokens as one split; ties to the nearer split, as the ranker breaks them:

* ``maxsim-trained``: the ranker's own rule on the model's trained token embeddings (checked against the model's own
  choice for the query placed after the document, :meth:`avey_b.model.streaming.DocumentState.query`, on the first
  queries);
* ``maxsim-init``: the same rule on the embeddings the model starts from (Xavier-normal, seed 0): near-orthogonal
  vectors, so nearly lexical matching;
* ``maxsim-lexical``: MaxSim with one-hot embeddings: each query token counts 1 where the split holds it (exact
  lexical matching without term weights: what MaxSim is at the limit of orthogonal embeddings);
* ``bm25``: Okapi BM25 (k1 = 1.2, b = 0.75) over the splits as documents, on the same token ids;
* ``random``: the expected recall of ``k`` splits drawn uniformly (exact, not sampled).

Evidence recall@k: the fraction of queries for which at least one chosen split lies in the answer span (at least
half of its tokens in it). Also the answer span's share of the document (the random baseline's reason).

    python benchmarks/evidence/choice.py --data ../shared/data --model /work/qs/model
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from avey_b.utils.records import Envelope, append_jsonl  # noqa: E402

HEADING = re.compile(r"^ (=(?: =)*) (.*?) \1 $")


def articles(path: Path) -> list[dict]:
    """WikiText-2's articles: ``{"title", "sections": [(heading or None, body text)]}``, level-2 sections with their
    subsections' text (the subsection headings dropped)."""
    out: list[dict] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = HEADING.match(line)
        if m and m.group(1) == "=":
            out.append({"title": m.group(2).strip(), "sections": [[None, []]]})
        elif m and m.group(1) == "= =" and out:
            out[-1]["sections"].append([m.group(2).strip(), []])
        elif not m and line.strip() and out:
            out[-1]["sections"][-1][1].append(line.strip())
    for a in out:
        a["sections"] = [(h, " ".join(body)) for h, body in a["sections"] if body]
    return out


def filler(data: Path) -> list[str]:
    """Other real text, in pieces of about a paragraph: tiny-shakespeare, SST-2, CoNLL-2003."""
    shakespeare = data.joinpath("tinyshakespeare", "input.txt").read_text(encoding="utf-8").split("\n\n")
    sst = [line.split("\t")[0] for line in data.joinpath("sst2", "train.tsv").read_text().splitlines()[1:]]
    conll, sentence = [], []
    for line in data.joinpath("conll2003", "eng.train").read_text().splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if sentence:
                conll.append(" ".join(sentence))
            sentence = []
        else:
            sentence.append(line.split()[0])
    pieces = [" ".join(p.split()) for p in shakespeare]
    pieces += [" ".join(sst[i:i + 20]) for i in range(0, len(sst), 20)]
    pieces += [" ".join(conll[i:i + 10]) for i in range(0, len(conll), 10)]
    return [p for p in pieces if p]


def build(tokenizer, arts: list[dict], extra: list[str], size: int) -> list[tuple[torch.Tensor, list[dict]]]:
    """Documents of ``size`` tokens, each from consecutive whole articles (the last filled up with other text), and
    each one's queries ``{"heading", "title", "span": (start, end)}``: every article in exactly one document."""
    pieces = iter(extra)
    docs = []
    ids: list[int] = []
    queries: list[dict] = []

    def add(text: str) -> tuple[int, int]:
        start = len(ids)
        ids.extend(tokenizer(" " + text, add_special_tokens=False)["input_ids"])
        return start, len(ids)

    def close() -> None:
        while len(ids) < size:
            piece = next(pieces, None)
            if piece is None:
                raise SystemExit(f"not enough text in the data folder for a document of {size} tokens")
            add(piece)
        counts: dict[str, int] = {}
        for q in queries:
            counts[q["heading"].lower()] = counts.get(q["heading"].lower(), 0) + 1
        kept = [q for q in queries if counts[q["heading"].lower()] == 1 and q["heading"] != "<unk>"
                and q["span"][1] <= size]
        docs.append((torch.tensor(ids[:size]), kept))

    for a in arts:
        for heading, body in a["sections"]:
            span = add(body)
            if heading is not None:
                queries.append({"heading": heading, "title": a["title"], "span": span})
        if len(ids) >= size:
            close()
            ids, queries = [], []
    if ids:
        close()
    return docs


def nearest_first_top_k(score: torch.Tensor, k: int) -> torch.Tensor:
    """The top-``k`` split ids of ``score`` (n,), ties to the later split (the nearer one to a query after them)."""
    n = score.numel()
    later_first = torch.arange(n - 1, -1, -1)
    order = score[later_first].argsort(descending=True, stable=True)
    return later_first[order[:k]]


def maxsim_scores(unit: torch.Tensor, doc: torch.Tensor, query: torch.Tensor, S: int) -> torch.Tensor:
    """MaxSim of the query's tokens against each split of ``doc`` (n,), the embeddings' unit vectors ``unit`` (V, d):
    factored through the ids, as the ranker's vocabulary path computes it."""
    cos = unit[query] @ unit.t()  # (q, V)
    n = doc.numel() // S
    best = cos[:, doc[:n * S]].view(query.numel(), n, S).amax(-1)  # (q, n)
    return best.sum(0)


def lexical_scores(doc: torch.Tensor, query: torch.Tensor, S: int) -> torch.Tensor:
    n = doc.numel() // S
    splits = doc[:n * S].view(n, S)
    return torch.stack([(splits == t).any(-1) for t in query.tolist()]).float().sum(0)


def bm25_scores(doc: torch.Tensor, query: torch.Tensor, S: int, k1: float = 1.2, b: float = 0.75) -> torch.Tensor:
    """Okapi BM25 of the query against each split (every split has ``S`` tokens: the length norm is 1)."""
    n = doc.numel() // S
    splits = doc[:n * S].view(n, S)
    score = torch.zeros(n)
    for t in query.tolist():
        tf = (splits == t).sum(-1).float()
        df = float((tf > 0).sum())
        idf = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
        score += idf * tf * (k1 + 1) / (tf + k1)
    return score


def in_span(split: torch.Tensor, span: tuple[int, int], S: int) -> torch.Tensor:
    start, end = split * S, split * S + S
    overlap = (torch.minimum(end, torch.tensor(span[1])) - torch.maximum(start, torch.tensor(span[0]))).clamp_min(0)
    return overlap * 2 >= S


def random_recall(n: int, m: int, k: int) -> float:
    """P(at least one of ``k`` splits drawn without replacement from ``n`` lies among ``m``)."""
    return 1.0 - math.comb(n - m, k) / math.comb(n, k) if n - m >= k else 1.0


def check_against_model(model, doc: torch.Tensor, queries: list[torch.Tensor], unit: torch.Tensor) -> int:
    """The model's own choice for each query split (a document state fed the document, then the query) against
    :func:`maxsim_scores`' top-k: how many agree exactly."""
    from avey_b.model.streaming import DocumentState

    S, k = model.config.split_size, model.config.num_retrieved_splits
    state = DocumentState(model).feed(doc[: doc.numel() // S * S])  # the query: one split after the document's
    agree = 0
    for q in queries:
        chosen = state.query(q).chosen[0]
        mine = nearest_first_top_k(maxsim_scores(unit, doc, q, S), k)
        agree += int(set(chosen.tolist()) == set(mine.tolist()))
    return agree


def parser(doc: str, sizes: str = "16384,131072,1048576") -> argparse.ArgumentParser:
    """The options every script here takes: the data folder, the model, the document lengths (a script adds its
    own, and ``--out``, its record)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the shared data folder")
    p.add_argument("--model", required=True, help="a pretrained Avey-B directory with its tokenizer")
    p.add_argument("--sizes", default=sizes, help="document lengths in tokens")
    return p


def timing_fields(model: str, gemm_before: float, gemm_after: float) -> dict:
    """What every timing record here ends with: the float32 GEMM rate before and after (GFLOP/s), the threads,
    the precision, the model and which ids."""
    return {"gemm_fp32_gflops": [round(gemm_before / 1e9, 1), round(gemm_after / 1e9, 1)],
            "threads": torch.get_num_threads(), "precision": "fp32", "model": str(model),
            "ids": "the model's tokenizer on WikiText-2 valid (+ filler); queries: section headings"}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--ks", default="1,3,10")
    p.add_argument("--check", type=int, default=20, help="queries checked against the model's own choice")
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("choice.jsonl"))
    args = p.parse_args()

    from transformers import AutoTokenizer

    from avey_b.model.modeling import AveyBModel

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AveyBModel.from_pretrained(args.model).eval()
    S = model.config.split_size
    trained = torch.nn.functional.normalize(model.embed_tokens.weight.detach().float(), dim=-1)
    torch.manual_seed(0)
    init = torch.nn.functional.normalize(torch.nn.init.xavier_normal_(torch.empty_like(trained)), dim=-1)
    arts = articles(args.data / "wikitext-2" / "valid.tokens.txt")
    extra = filler(args.data)
    ks = [int(k) for k in args.ks.split(",")]
    for size in (int(s) for s in args.sizes.split(",")):
        docs = build(tokenizer, arts, extra, size)
        for form in ("heading", "title+heading"):
            env = Envelope.begin()
            hits = {name: {k: 0 for k in ks} for name in ("maxsim-trained", "maxsim-init", "maxsim-lexical", "bm25")}
            rand = {k: 0.0 for k in ks}
            share, count, agree, checked = 0.0, 0, 0, 0
            for doc, queries in docs:
                n = doc.numel() // S
                qids = []
                for q in queries:
                    text = q["heading"] if form == "heading" else f"{q['title']} {q['heading']}"
                    query = torch.tensor(tokenizer(" " + text, add_special_tokens=False)["input_ids"][:S])
                    qids.append(query)
                    m = int(in_span(torch.arange(n), q["span"], S).sum())
                    share += m / n
                    scores = {"maxsim-trained": maxsim_scores(trained, doc, query, S),
                              "maxsim-init": maxsim_scores(init, doc, query, S),
                              "maxsim-lexical": lexical_scores(doc, query, S), "bm25": bm25_scores(doc, query, S)}
                    for name, score in scores.items():
                        for k in ks:
                            hits[name][k] += bool(in_span(nearest_first_top_k(score, k), q["span"], S).any())
                    for k in ks:
                        rand[k] += random_recall(n, m, k)
                count += len(queries)
                if checked < args.check and qids:
                    few = qids[:args.check - checked]
                    agree += check_against_model(model, doc, few, trained)
                    checked += len(few)
            record = {"bench": "evidence_choice", "document_tokens": size, "documents": len(docs), "split_size": S,
                      "query_form": form, "queries": count, "answer_share": round(share / count, 5),
                      "recall": {name: {str(k): round(v / count, 4) for k, v in by_k.items()}
                                 for name, by_k in hits.items()},
                      "random": {str(k): round(v / count, 4) for k, v in rand.items()},
                      "model_choice_agrees": f"{agree}/{checked}", "model": str(args.model),
                      "ids": "the model's tokenizer on WikiText-2 valid (+ filler)"}
            print(record, flush=True)
            append_jsonl(args.out, {**record, **env.end()}, echo=False)


if __name__ == "__main__":
    main()
