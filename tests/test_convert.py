"""Loading the authors' release checkpoints: a release-format directory is built here from a tiny random
config with the release's exact key names and shapes, and checked against an explicit, slow re-statement of the
release's forward pass."""

import json
import logging

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification

from avey_b import AveyBForMaskedLM, AveyBForSequenceClassification, AveyBForTokenClassification, AveyBModel, cli
from avey_b.apps.convert import ReleaseConversionError, convert_release_checkpoint

V, D, L, S, K, EPS = 50, 16, 3, 4, 2, 1e-12


def release_weights(head="masked_lm", num_labels=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, scale=0.3: torch.randn(*shape, generator=g) * scale  # noqa: E731
    w = {"embed.weight": r(V, D, scale=1.0), "ranker.down_proj": r(S, (K + 1) * S)}
    for i in range(L):
        w[f"layers.{i}.norm.weight"] = 1 + r(D, scale=0.1)
        w[f"layers.{i}.enricher.weight"] = r(4 * D, D)
        w[f"layers.{i}.enricher.bias"] = r(4 * D, scale=0.1)
        w[f"layers.{i}.fuser.weight"] = r(D, 3 * D)
        w[f"layers.{i}.fuser.bias"] = r(D, scale=0.1)
        w[f"layers.{i}.alpha"] = torch.tensor(0.8 + 0.1 * i)
        if i % 2 == 0:
            w[f"layers.{i}.spatial_proj"] = r(S, S, scale=0.5)
    if head == "sequence_classification":
        w.update({"dense.0.weight": r(2 * D, D), "dense.0.bias": r(2 * D), "dense.2.weight": r(2 * D, 2 * D),
                  "dense.2.bias": r(2 * D), "dense.4.weight": r(D, 2 * D), "dense.4.bias": r(D),
                  "classifier.weight": r(num_labels, D), "classifier.bias": r(num_labels)})
    if head == "token_classification":
        w.update({"dense.0.weight": r(D, D), "dense.0.bias": r(D), "classifier.weight": r(num_labels, D),
                  "classifier.bias": r(num_labels)})
    return w


def write_release(path, weights, extra_config=None):
    path.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "avey-b", "vocab_size": V, "d_embed": D, "n_layers": L, "chunk_size": S, "k": K,
              "eps": EPS, "hidden_size": D, "max_position_embeddings": 2048, **(extra_config or {})}
    (path / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(path / "model.safetensors"))
    return path


def release_hidden(w, ids):
    """The release's forward pass on one row of ids as the release takes it (whatever pads the batch is a token),
    with plain loops: the row zero-padded to a multiple of S after embedding, the zero rows ranked, compressed and
    mixed like tokens, and cut off at the end."""
    w = {k: v.double() for k, v in w.items()}
    x = w["embed.weight"][ids]  # (N, d)
    N, n = x.shape[0], -(-x.shape[0] // S)
    x = torch.cat([x, torch.zeros(n * S - N, D, dtype=x.dtype)])  # split padding: zero rows
    splits = [x[i * S:(i + 1) * S] for i in range(n)]
    unit = lambda v: v / (v.norm() + EPS)  # noqa: E731  ranker cosine: x / (|x| + eps)
    h_splits = []
    for i in range(n):
        scored = []
        for j in range(i):  # preceding splits only
            score = sum(max(float(unit(splits[i][t]) @ unit(splits[j][u])) for u in range(S)) for t in range(S))
            scored.append((score, j))
        top = sorted(scored, key=lambda sj: -sj[0])[:K]  # descending score
        blocks = []
        if top:
            smallest = min(s for s, _ in top)
            blocks = [splits[j] * (s / (smallest + EPS)) for s, j in top]
        blocks = [torch.zeros(S, D, dtype=x.dtype)] * (K - len(top)) + blocks + [splits[i]]  # zeros on the left
        h_splits.append(w["ranker.down_proj"] @ torch.cat(blocks) + splits[i])
    out = []
    for h in h_splits:
        for layer in range(L):
            p = f"layers.{layer}."
            normed = h / torch.sqrt((h * h).mean(-1, keepdim=True) + EPS) * w[p + "norm.weight"]
            z = F.gelu(normed @ w[p + "enricher.weight"].T + w[p + "enricher.bias"])
            ctx, bypass = z[:, :2 * D], z[:, 2 * D:]
            mixed, gate = ctx[:, :D], ctx[:, D:]
            if layer % 2 == 0:
                mixed = w[p + "spatial_proj"] @ mixed
            else:
                nz = mixed / mixed.norm(dim=-1, keepdim=True).clamp_min(1e-12)
                sim = nz @ nz.T
                mixed = (sim / sim.abs().sum(-1, keepdim=True).clamp_min(1e-12)) @ mixed
            fused = torch.cat([gate * mixed, bypass], -1) @ w[p + "fuser.weight"].T + w[p + "fuser.bias"]
            h = fused + w[p + "alpha"] * h
        out.append(h)
    return torch.cat(out)[:N], w


@pytest.fixture
def ids():
    return torch.randint(0, V, (2, 3 * S), generator=torch.Generator().manual_seed(1))


def test_masked_lm_release_matches_the_explicit_forward(tmp_path, ids, caplog):
    weights = release_weights()
    src = write_release(tmp_path / "release", weights, extra_config={"some_future_field": 3})
    with caplog.at_level(logging.WARNING):
        model = AutoModelForMaskedLM.from_pretrained(src)
    assert "some_future_field" in caplog.text  # unknown config fields are reported by name
    assert isinstance(model, AveyBForMaskedLM)
    assert model.config.enricher_activation == "gelu" and model.config.ranker_weighting == "min"
    model = model.double().eval()
    with torch.no_grad():
        logits = model(ids).logits
    for b in range(2):
        hidden, w = release_hidden(weights, ids[b])
        torch.testing.assert_close(logits[b], hidden @ w["embed.weight"].T, rtol=1e-9, atol=1e-9)


def test_classification_release_heads_match(tmp_path, ids):
    weights = release_weights("sequence_classification", num_labels=3)
    model = AutoModelForSequenceClassification.from_pretrained(write_release(tmp_path / "cls", weights))
    assert model.config.num_labels == 3
    model = model.double().eval()
    with torch.no_grad():
        logits = model(ids).logits
    for b in range(2):
        hidden, w = release_hidden(weights, ids[b])
        pooled = hidden.mean(0)
        for i in (0, 2):
            pooled = F.gelu(pooled @ w[f"dense.{i}.weight"].T + w[f"dense.{i}.bias"])
        pooled = pooled @ w["dense.4.weight"].T + w["dense.4.bias"]
        torch.testing.assert_close(logits[b], pooled @ w["classifier.weight"].T + w["classifier.bias"])

    tok_weights = release_weights("token_classification", num_labels=5)
    tok_model = AveyBForTokenClassification.from_pretrained(write_release(tmp_path / "tok", tok_weights))
    tok_model = tok_model.double().eval()
    hidden, w = release_hidden(tok_weights, ids[0])
    expected = torch.tanh(hidden @ w["dense.0.weight"].T + w["dense.0.bias"]) @ w["classifier.weight"].T
    with torch.no_grad():
        torch.testing.assert_close(tok_model(ids[:1]).logits[0], expected + w["classifier.bias"])


def release_logits(head, w, hidden):
    """The release head's logits on the release's hidden states of one row (N, d): the masked-LM decoder tied to
    the embedding, the sequence head's MLP on the mean over every position, the token head's tanh layer."""
    if head == "masked_lm":
        return hidden @ w["embed.weight"].T
    if head == "sequence_classification":
        pooled = hidden.mean(0)
        for i in (0, 2):
            pooled = F.gelu(pooled @ w[f"dense.{i}.weight"].T + w[f"dense.{i}.bias"])
        pooled = pooled @ w["dense.4.weight"].T + w["dense.4.bias"]
        return pooled @ w["classifier.weight"].T + w["classifier.bias"]
    return torch.tanh(hidden @ w["dense.0.weight"].T + w["dense.0.bias"]) @ w["classifier.weight"].T \
        + w["classifier.bias"]


@pytest.mark.parametrize("head, cls", [("masked_lm", AveyBForMaskedLM),
                                       ("sequence_classification", AveyBForSequenceClassification),
                                       ("token_classification", AveyBForTokenClassification)])
def test_release_padding_gives_the_releases_logits_on_short_padded_and_batched_inputs(tmp_path, head, cls):
    """``padding="release"``: the release's logits on an input shorter than a split, on one whose last split is
    padded, and on a batch whose shorter rows are padded with a pad id (the release ignores ``attention_mask``:
    every row is computed as its padded ids, so a row's logits depend on the batch's longest row). The rows'
    lengths avoid exact MaxSim ties between different splits (two splits that both hold a pad token score the same
    for a split of pad tokens): the release orders tied splits as ``torch.topk`` happens to, which no rule
    reproduces (``avey_b/model/ranker.py``)."""
    weights = release_weights(head, num_labels=3)
    model = cls.from_pretrained(write_release(tmp_path / head, weights), padding="release").double().eval()
    assert model.config.padding == "release"
    g = torch.Generator().manual_seed(2)
    short, odd = torch.randint(0, V, (1, S - 1), generator=g), torch.randint(0, V, (1, 2 * S + 1), generator=g)
    lengths, pad_id = (2 * S + 1, S + 1, 2 * S), 1
    batch = torch.full((3, 2 * S + 1), pad_id)
    for b, n in enumerate(lengths):
        batch[b, :n] = torch.randint(2, V, (n,), generator=g)
    mask = (torch.arange(2 * S + 1) < torch.tensor(lengths)[:, None]).long()
    with torch.no_grad():
        for ids, attention_mask in ((short, None), (odd, None), (batch, mask)):
            logits = model(ids, attention_mask=attention_mask).logits
            for b in range(ids.shape[0]):
                hidden, w = release_hidden(weights, ids[b])
                torch.testing.assert_close(logits[b], release_logits(head, w, hidden), rtol=1e-9, atol=1e-9)
        alone = model(batch[1:2, :lengths[1]]).logits  # the second row without the batch's padding
        masked = cls.from_pretrained(tmp_path / head).double().eval()  # the library's default: padding masked
        assert masked.config.padding == "masked"
        masked_logits = masked(batch, attention_mask=mask).logits
    first = logits[1] if head == "sequence_classification" else logits[1, :lengths[1]]
    assert (first - alone[0]).abs().max() > 1e-6  # the release's row depends on the batch's padding
    assert (masked_logits[1] - logits[1]).abs().max() > 1e-6


def test_convert_then_save_then_load_round_trip(tmp_path, ids):
    src = write_release(tmp_path / "release", release_weights())
    direct = AveyBForMaskedLM.from_pretrained(src).eval()
    assert cli.main(["convert", str(src), str(tmp_path / "ours")]) == 0  # `avey-b convert SRC DST`
    cfg = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert "split_size" in cfg and "d_embed" not in cfg  # a standard checkpoint of ours
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "ours").eval()
    assert AutoConfig.from_pretrained(tmp_path / "ours").enricher_layout == "release"
    loaded.save_pretrained(tmp_path / "again")
    again = AveyBForMaskedLM.from_pretrained(tmp_path / "again").eval()
    with torch.no_grad():
        ref = direct(ids).logits
        torch.testing.assert_close(loaded(ids).logits, ref, rtol=0, atol=0)
        torch.testing.assert_close(again(ids).logits, ref, rtol=0, atol=0)
    backbone = AveyBModel.from_pretrained(src).eval()  # the backbone alone loads from a release MLM checkpoint
    with torch.no_grad():
        torch.testing.assert_close(backbone(ids).last_hidden_state @ direct.model.embed_tokens.weight.T, ref)


def test_the_releases_stated_length_and_retrieval_pooling_are_kept_and_cut_nothing(tmp_path, ids):
    """The release's config.json states an input length (``max_position_embeddings``, its ``AveyConfig``'s
    ``context_len``, 512 when absent) and may set ``retrieval_pooling``: both are kept (as ``context_len`` and
    ``retrieval_pooling``) through conversion and a save, for the paper's evaluation protocol to read, while the
    model itself runs past that length exactly as the release computes and no ``max_position_embeddings`` attribute
    exists for generic code to cut it with."""
    weights = release_weights()
    src = write_release(tmp_path / "short", weights, extra_config={"max_position_embeddings": 8,
                                                                   "retrieval_pooling": "eos"})
    model = AveyBForMaskedLM.from_pretrained(src).double().eval()
    assert model.config.context_len == 8 and model.config.retrieval_pooling == "eos"
    assert not hasattr(model.config, "max_position_embeddings")
    assert ids.shape[1] > 8  # past the stated length: the release's own forward pass, uncut
    with torch.no_grad():
        logits = model(ids).logits
    hidden, w = release_hidden(weights, ids[0])
    torch.testing.assert_close(logits[0], hidden @ w["embed.weight"].T, rtol=1e-9, atol=1e-9)
    assert cli.main(["convert", str(src), str(tmp_path / "ours")]) == 0
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert saved["context_len"] == 8 and saved["retrieval_pooling"] == "eos" and "max_position_embeddings" not in saved
    plain = write_release(tmp_path / "plain", weights, extra_config={"retrieval_pooling": "cls"})
    config = json.loads((plain / "config.json").read_text())
    del config["max_position_embeddings"]
    (plain / "config.json").write_text(json.dumps(config))
    loaded = AutoConfig.from_pretrained(plain)
    assert loaded.context_len == 512  # AveyConfig's default context_len, what EncodEval read
    assert loaded.retrieval_pooling == "mean"  # EncodEval pools the last token only for "eos"
    from avey_b import AveyBConfig

    with pytest.raises(ValueError, match="no max_position_embeddings.*context_len"):
        AveyBConfig(max_position_embeddings=2048)
    with pytest.raises(ValueError, match="retrieval_pooling='cls' is not one of"):
        AveyBConfig(retrieval_pooling="cls")


def test_unknown_key_is_named(tmp_path):
    weights = release_weights()
    weights["layers.0.extra_gate"] = torch.zeros(3)
    with pytest.raises(ReleaseConversionError, match="layers.0.extra_gate"):
        convert_release_checkpoint(write_release(tmp_path / "r", weights), tmp_path / "out")


def test_wrong_shape_is_named(tmp_path):
    weights = release_weights()
    weights["layers.2.spatial_proj"] = torch.zeros(S + 1, S + 1)
    with pytest.raises(ReleaseConversionError, match=r"model.layers.2.mixer.weight: release \(5, 5\)"):
        convert_release_checkpoint(write_release(tmp_path / "r", weights), tmp_path / "out")


def test_missing_and_misplaced_keys_are_named(tmp_path):
    weights = release_weights()
    del weights["layers.1.alpha"]
    with pytest.raises(ReleaseConversionError, match="lacks weight.*model.layers.1.alpha"):
        convert_release_checkpoint(write_release(tmp_path / "r1", weights), tmp_path / "out1")
    weights = release_weights()
    weights["layers.1.spatial_proj"] = torch.zeros(S, S)  # layer 1 is dynamic in the release
    with pytest.raises(ReleaseConversionError, match="model.layers.1.mixer.weight"):
        convert_release_checkpoint(write_release(tmp_path / "r2", weights), tmp_path / "out2")


def test_missing_config_field_is_named(tmp_path):
    src = write_release(tmp_path / "r", release_weights())
    cfg = json.loads((src / "config.json").read_text())
    del cfg["chunk_size"], cfg["d_embed"]
    cfg["n_layers"] = L
    cfg["d_embed"] = D
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ReleaseConversionError, match="chunk_size"):
        convert_release_checkpoint(src, tmp_path / "out")


def test_non_release_directory_is_rejected(tmp_path, capsys):
    AveyBModel(AutoConfig.for_model("avey-b", vocab_size=V, hidden_size=D, num_hidden_layers=2, split_size=S,
                                    num_retrieved_splits=1)).save_pretrained(tmp_path / "ours")
    with pytest.raises(ReleaseConversionError, match="not an Avey-B release checkpoint"):
        convert_release_checkpoint(tmp_path / "ours", tmp_path / "out")
    assert cli.main(["convert", str(tmp_path / "ours"), str(tmp_path / "out"), "--local-files-only"]) == 1
    err = capsys.readouterr().err
    assert "avey-b convert: error: " in err and "is not an Avey-B release checkpoint" in err


def test_release_tokenizer_helper(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from avey_b.data.tokenization import load_tokenizer

    vocab = {t: i for i, t in enumerate(["<|endoftext|>", "[CLS]", "[SEP]", "a", "b", "c", "ab"])}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")]))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", cls_token="[CLS]",
                            sep_token="[SEP]").save_pretrained(tmp_path / "tok")  # no mask, no pad: like the release
    tok = load_tokenizer(tmp_path / "tok", vocab_size=64)
    assert tok.mask_token == "<|mask|>" and tok.mask_token_id == 7
    assert tok.pad_token == "<|endoftext|>" and tok.cls_token == "[CLS]" and tok.sep_token == "[SEP]"
    assert len(tok) == 64
    assert tok("ab c <|mask|>")["input_ids"] == [6, 5, 7]
    with pytest.raises(ValueError, match="more than the model's vocab_size=4"):
        load_tokenizer(tmp_path / "tok", vocab_size=4)


AUTHORS_CLASSES = {"masked_lm": ("AveyForMaskedLM", AveyBForMaskedLM),
                   "sequence_classification": ("AveyForSequenceClassification", AveyBForSequenceClassification),
                   "token_classification": ("AveyForTokenClassification", AveyBForTokenClassification)}


@pytest.mark.parametrize("head", list(AUTHORS_CLASSES))
def test_the_authors_own_model_converts_to_the_same_logits(tmp_path, reference_copy, head):
    """Held against the authors' own code, not a re-statement of it: their ``modeling_avey.py`` (a reference copy,
    imported eagerly as ``avey-b bench --release-code`` imports it) builds a tiny model of each release class, its
    parameters seeded and moved off their initial values (zero biases, unit norms and ``alpha = 1`` would hide a
    swap), and saves it with its own ``save_pretrained`` (its ``AveyConfig`` config.json, its ``state_dict`` keys).
    The converter must accept every one of those keys, place each tensor unchanged in exactly one weight of ours
    (no weight of ours left at its initialization), and the converted model (``padding="release"``; the default
    padding too where no row needs padding) must give the release model's own logits, in float64 to 1e-9, on rows
    shorter than a split, of a length not a multiple of it, and in a batch of two (no id repeated in a row: tied
    MaxSim scores are ordered as ``torch.topk`` happens to, see the padding test above)."""
    from safetensors.torch import load_file

    from avey_b.benchmarking.release_code import load_release

    authors = load_release(reference_copy("avey-b-release"))  # torch.compile an identity while importing
    class_name, cls = AUTHORS_CLASSES[head]
    torch.manual_seed(3)
    config = authors.AveyConfig(vocab_size=V, d_embed=D, n_layers=L, chunk_size=S, k=K, eps=EPS, num_labels=3)
    release = getattr(authors, class_name)(config)
    with torch.no_grad():
        for p in release.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    release.eval().save_pretrained(tmp_path / "release")
    state = release.state_dict()
    assert set(load_file(str(tmp_path / "release" / "model.safetensors"))) == set(state)
    assert json.loads((tmp_path / "release" / "config.json").read_text())["chunk_size"] == S  # the release's format

    assert convert_release_checkpoint(tmp_path / "release", tmp_path / "ours") == head  # raises on an unknown key
    ours = cls.from_pretrained(tmp_path / "ours", padding="release").double().eval()
    mine = {k: v for k, v in ours.state_dict().items() if k != "decoder.weight"}  # the decoder is the tied embedding
    placed = {key: [k for k, v in mine.items() if v.shape == t.shape and torch.equal(v, t.double())]
              for key, t in state.items()}
    assert all(len(where) == 1 for where in placed.values()), placed  # every release tensor, in one place
    assert sorted(k for where in placed.values() for k in where) == sorted(mine)  # and nothing of ours left out

    release = release.double()
    g = torch.Generator().manual_seed(4)  # no id twice in a row: a repeated token ties two splits' MaxSim scores
    rows = [torch.stack([torch.randperm(V, generator=g)[:n] for _ in range(b)])
            for b, n in ((1, S - 1), (1, 2 * S + 1), (2, 2 * S + 1), (2, 3 * S))]
    with torch.no_grad():
        for ids in rows:
            expected = release(ids).logits
            torch.testing.assert_close(ours(ids).logits, expected, rtol=1e-9, atol=1e-9)
        default = cls.from_pretrained(tmp_path / "ours").double().eval()  # padding="masked": equal without padding
        torch.testing.assert_close(default(rows[-1]).logits, release(rows[-1]).logits, rtol=1e-9, atol=1e-9)
