"""Mem-Gallery loader: schema, image rounds, question captions, the 70/10/20 split (seed 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfrontier.core.provenance import sha256_file
from memfrontier.eval.datasets import DatasetError, data_root, dataset_path, load_dataset
from memfrontier.eval.datasets.mem_gallery import load_mem_gallery, mem_gallery_split, split_ids


@pytest.fixture(scope="module")
def mg():
    return load_mem_gallery()


@pytest.mark.data
def test_counts_match_data_readme(mg):
    assert len(mg) == 20
    assert sum(len(c.records) for c in mg) == 3962
    assert sum(len(r.images) for c in mg for r in c.records) == 1003
    assert sum(len(c.questions) for c in mg) == 1711
    assert len({c.id for c in mg}) == 20


@pytest.mark.data
def test_image_round_keeps_ids_captions_paths(mg):
    baking = next(c for c in mg if c.id == "Baking_Dessert_Daily_Life_Skill")
    r = baking.records[0]
    assert r.id == "Baking_Dessert_Daily_Life_Skill:D1:1" and r.session_id == "Baking_Dessert_Daily_Life_Skill:D1"
    assert r.timestamp == "2024-06-24T00:00:00+00:00"
    assert r.text.startswith("Maya: I am very interested in handmade baking") and "\nAssistant: Certainly." in r.text
    (img,) = r.images
    assert img.id == "D1:IMG_001" and img.caption.startswith("Display counter in a bakery")
    assert img.path.endswith("mem_gallery/image/Baking_Dessert_Daily_Life_Skill/D1_IMG_001.jpg")
    assert not Path(img.path).exists()  # our copy has captions only
    assert "[shared image: Display counter" in r.render()


@pytest.mark.data
def test_questions_clues_and_question_images(mg):
    baking = next(c for c in mg if c.id == "Baking_Dessert_Daily_Life_Skill")
    q0 = baking.questions[0]
    assert q0.id == "Baking_Dessert_Daily_Life_Skill:q0" and q0.category == "FR"
    assert q0.evidence_ids[:2] == ["Baking_Dessert_Daily_Life_Skill:D1:1", "Baking_Dessert_Daily_Life_Skill:D1:2"]
    assert baking.questions[1].category == "AR" and baking.questions[1].abstention
    withimg = [q for c in mg for q in c.questions if "question_image" in q.meta]
    assert len(withimg) == 487
    q = next(q for q in baking.questions if q.answer == "Foxglove")
    assert q.question.startswith("What species of plant is shown in the picture?\n(Question image: Cluster of purple")
    assert q.meta["question_image"].endswith("QA_IMG_001.jpg")
    ids = {r.id for c in mg for r in c.records}
    assert all(e in ids for c in mg for q in c.questions for e in q.evidence_ids)  # every clue resolves


@pytest.mark.data
def test_split_70_10_20_seed_13(mg):
    s = split_ids([c.id for c in mg])
    assert [len(s[k]) for k in ("train", "val", "test")] == [14, 2, 4]
    assert set(s["train"]) | set(s["val"]) | set(s["test"]) == {c.id for c in mg}
    test = mem_gallery_split(mg, "test")
    # the seed-13 split gives the question counts of MemPilot Table 4 (AR excluded): 1,062 / 190 / 275
    assert sum(len(c.questions) for c in mem_gallery_split(mg, "train")) == 1062
    assert sum(len(c.questions) for c in mem_gallery_split(mg, "val")) == 190
    assert sum(len(c.questions) for c in test) == 275
    assert all(q.category != "AR" for c in test for q in c.questions)
    assert [c.id for c in load_dataset("mem_gallery", "test")] == sorted(s["test"])
    assert len(load_dataset("mem_gallery", "all")) == 20
    with pytest.raises(ValueError, match="unknown split"):
        load_dataset("mem_gallery", "dev")


@pytest.mark.data
def test_folder_sha256_for_provenance():
    d = dataset_path("mem_gallery")
    assert d == data_root() / "mem_gallery" / "dialog" and d.is_dir()
    assert len(sha256_file(d)) == 64 and sha256_file(d) == sha256_file(d)


def test_missing_and_malformed(tmp_path):
    with pytest.raises(DatasetError, match="no \\*.json"):
        load_mem_gallery(tmp_path)
    (tmp_path / "Bad.json").write_text(
        json.dumps(
            {
                "multi_session_dialogues": [{"session_id": "X1", "date": "2024-01-01", "dialogues": []}],
                "human-annotated QAs": [],
            }
        )
    )
    with pytest.raises(DatasetError, match="Bad.json.*D<k>"):
        load_mem_gallery(tmp_path)
    (tmp_path / "Bad.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not JSON"):
        load_mem_gallery(tmp_path / "Bad.json")


def test_minimal_file(tmp_path):
    conv = {
        "character_profile": {"name": "Ana"},
        "multi_session_dialogues": [
            {
                "session_id": "D1",
                "date": "2024-05-01",
                "dialogues": [
                    {
                        "round": "D1:1",
                        "user": "Look at my cat",
                        "assistant": "Cute!",
                        "image_id": ["D1:IMG_001"],
                        "input_image": ["../image/T/D1_IMG_001.jpg"],
                        "image_caption": ["a grey cat"],
                    }
                ],
            }
        ],
        "human-annotated QAs": [
            {
                "point": "VS",
                "question": "Which image shows a cat?",
                "answer": "D1:IMG_001",
                "session_id": ["D1"],
                "clue": ["D1:1", "D9:9"],
            }
        ],
    }
    (tmp_path / "T.json").write_text(json.dumps(conv))
    (c,) = load_mem_gallery(tmp_path)
    assert c.records[0].text == "Ana: Look at my cat\nAssistant: Cute!"
    assert c.records[0].images[0].path == str((tmp_path / "../image/T/D1_IMG_001.jpg").resolve())
    q = c.questions[0]
    assert q.evidence_ids == ["T:D1:1"] and q.meta["unresolved_clues"] == ["D9:9"] and q.answer == "D1:IMG_001"
