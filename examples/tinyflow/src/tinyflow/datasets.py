"""Small data sets for the examples: scikit-learn's bundled 8x8 digits (no download)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._base import TinyFlowError


class Digits(NamedTuple):
    """Train/test split: images (N, 1, 8, 8) float32 in [0, 1] (or (N, 64) when flat),
    integer labels (N,)."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def load_digits(flatten: bool = False, test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """The 1,797 8x8 digit images of ``sklearn.datasets.load_digits``, split reproducibly."""
    try:
        from sklearn.datasets import load_digits as _load
    except ImportError:
        raise TinyFlowError("load_digits needs scikit-learn: pip install 'tinyflow[examples]'"
                            ) from None
    data = _load()
    images = (data.images / 16.0).astype(np.float32)
    images = images.reshape(len(images), -1) if flatten else images[:, None, :, :]
    labels = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(images))
    n_test = int(round(len(images) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Digits(images[train], labels[train], images[test], labels[test])


def one_hot(labels: np.ndarray, classes: int = 10) -> np.ndarray:
    return np.eye(classes, dtype=np.float32)[labels]
