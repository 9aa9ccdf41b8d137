"""The real bundled model: offline load, normalised vectors, meaning-based retrieval."""
from __future__ import annotations

import numpy as np

from lab.pipeline import Pipeline


def test_bundled_model_embeds_offline_and_normalised(real_embedder):
    vectors = real_embedder.embed(["The cat sat on the mat.", "A kitten rested on a rug.", "Quarterly tax filing"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_paraphrase_without_shared_words_is_found(tmp_path, real_embedder):
    pipe = Pipeline.open(tmp_path / "s", embedder=real_embedder, create=True)
    pipe.save_many([
        {"namespace": "n", "content": "Noor has a dental cleaning booked with Dr. Vogt on Thursday."},
        {"namespace": "n", "content": "The billing service returned ERR-4471 during the outage."},
        {"namespace": "n", "content": "We chose Postgres 16 for the analytics warehouse."},
    ], progress=False)
    hits = pipe.search("when does my daughter see the teeth doctor", "n", k=3)
    assert hits[0].content.startswith("Noor has a dental cleaning")
    assert "vector" in hits[0].signals
    pipe.close()
