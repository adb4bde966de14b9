"""Metrics of the downstream protocol against hand-computed values, standard vs paper scoring."""

import math

import pytest

from avey_b.evaluation import metrics as M


def test_accuracy_and_errors():
    assert M.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError, match="3 predictions for 2 labels"):
        M.accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="no examples"):
        M.accuracy([], [])


def test_iob1_to_iob2():
    # original CoNLL-2003: I- opens a chunk; B- only separates two adjacent chunks of one type
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG", "I-LOC"]
    assert M.iob1_to_iob2(iob1) == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG", "B-LOC"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC"]
    assert M.iob1_to_iob2(iob2) == iob2  # idempotent on IOB2


def test_entity_f1_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "B-LOC"]]
    # gold entities: PER(0-1), LOC(3), ORG(0); predicted: PER(0-1), ORG(0), LOC(1) -> 2 correct of 3 / 3
    s = M.entity_f1(gold, pred)
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(2 / 3)


def test_ner_standard_and_paper_disagree():
    gold = [["B-PER", "I-PER", "O", "O"]]
    pred = [["B-PER", "O", "O", "O"]]  # half of the name: the entity is wrong
    assert M.entity_f1(gold, pred)["f1"] == 0.0
    # paper: per-label F1 over words: B-PER 1, I-PER 0, O 2*2/(3+2) = 0.8 -> macro 0.6
    assert M.per_sentence_macro_f1(gold, pred) == pytest.approx(0.6)
    # averaged per sentence, not pooled: a perfect second sentence lifts the mean to 0.8
    assert M.per_sentence_macro_f1(gold + [["O"]], pred + [["O"]]) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="sentence 0 has 4 gold tags but 3 predicted"):
        M.per_sentence_macro_f1(gold, [["O", "O", "O"]])


def test_squad_normalisation_and_scores():
    assert M.normalize_answer("  The  Eiffel-Tower!! ") == "eiffeltower"
    assert M.normalize_answer("an apple and a pear") == "apple and pear"
    assert M.squad_exact("the Eiffel Tower", "Eiffel Tower.") == 1.0
    # pred tokens {paris, france} vs gold {paris}: P 1/2, R 1 -> F1 2/3
    assert M.squad_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert M.squad_f1("", "") == 1.0 and M.squad_f1("Paris", "") == 0.0


def test_squad_v2_no_answer_handling():
    golds = {"a": ["Paris", "the city of Paris"], "b": [], "c": ["1889"]}
    preds = {"a": "city of Paris", "b": "", "c": "in 1889"}
    s = M.squad_scores(preds, golds)
    # a: exact with the second answer after normalisation; b: correct abstention; c: F1 2/3
    assert s["exact"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx((1 + 1 + 2 / 3) / 3)
    assert s["NoAns_f1"] == 1.0 and s["HasAns_exact"] == 0.5
    # answering an unanswerable question scores 0; a missing prediction counts as "no answer"
    s = M.squad_scores({"a": "Paris", "b": "Paris"}, {"a": ["Paris"], "b": []})
    assert s["f1"] == 0.5
    assert M.squad_scores({}, {"b": []})["exact"] == 1.0
    with pytest.raises(ValueError, match="unknown question ids"):
        M.squad_scores({"zzz": "x"}, {"a": ["Paris"]})


def test_qa_standard_and_paper_disagree():
    # context tokens 3,4,5 = "the Eiffel Tower"; the model predicts tokens 4,5 = "Eiffel Tower"
    assert M.squad_f1("Eiffel Tower", "the Eiffel Tower") == 1.0  # articles are normalised away
    assert M.token_set_f1({4, 5}, {3, 4, 5}) == pytest.approx(0.8)  # positions are not
    assert M.token_set_f1([], []) == 1.0 and M.token_set_f1([1], []) == 0.0


def test_ndcg_standard_vs_paper():
    qrels = {"d1": 1, "d2": 1, "d3": 1}
    ranking = ["x", "d1", "y", "z"]
    dcg = 1 / math.log2(3)
    assert M.ndcg_at_k(ranking, qrels, 10, "all") == pytest.approx(dcg / (1 + 1 / math.log2(3) + 0.5))
    assert M.ndcg_at_k(ranking, qrels, 10, "retrieved") == pytest.approx(dcg / 1.0)
    # graded relevance with linear gains; cut-off honoured
    assert M.ndcg_at_k(["a", "b"], {"a": 1, "b": 2}) == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert M.ndcg_at_k(["x"] * 10 + ["d1"], qrels, 10) == 0.0
    with pytest.raises(ValueError, match="ideal must be"):
        M.ndcg_at_k(ranking, qrels, 10, "best")


def test_mean_ndcg_skips_queries_without_relevant_docs():
    qrels = {"q1": {"d1": 1}, "q2": {"d9": 0}, "q3": {"d3": 1}}
    rankings = {"q1": ["d1"], "q3": ["x", "y"]}
    assert M.mean_ndcg_at_k(rankings, qrels) == pytest.approx(0.5)  # q2 ignored, q3 scores 0
    with pytest.raises(ValueError, match="no query has a relevant document"):
        M.mean_ndcg_at_k({}, {"q": {"d": 0}})
