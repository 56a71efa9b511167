"""The generated scenes the mini ssd and maskrcnn models detect in: images with a few filled rectangles,
discs and triangles (random size, aspect and colour, so the class is the *shape*) on a noisy background,
with each object's pixel mask, tight box and category."""

from __future__ import annotations

from typing import Any

import numpy as np

SHAPES = ("rectangle", "disc", "triangle")  # category ids 1, 2, 3; 0 is background and pads the lists


def shape_mask(kind: int, h: int, w: int, flip: bool) -> np.ndarray:
    """The (h, w) mask of shape ``kind`` filling its box; ``flip`` turns a triangle upside down."""
    yy, xx = np.mgrid[0:h, 0:w] + 0.5  # pixel centres
    if kind == 0:
        return np.ones((h, w), dtype=bool)
    if kind == 1:
        return ((xx - w / 2) / (w / 2)) ** 2 + ((yy - h / 2) / (h / 2)) ** 2 <= 1
    tri = np.abs(xx - w / 2) <= yy / h * (w / 2)
    return tri[::-1] if flip else tri


def scene(rng: np.random.Generator, d: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One image (3, s, s) uint8, its object masks (k, s, s), tight boxes (k, 4) as (x0, y0, x1, y1) and
    category ids (k,), padded to ``d["max_objects"]`` = k with empty masks and category 0."""
    s, k = d["image_size"], d["max_objects"]
    img = np.full((3, s, s), rng.uniform(0.1, 0.4), dtype=np.float32)
    masks = np.zeros((k, s, s), dtype=bool)
    boxes, labels = np.zeros((k, 4), np.float32), np.zeros(k, np.int64)
    placed: list[tuple[int, int, int, int]] = []
    for i in range(rng.integers(1, k + 1)):
        for _ in range(20):  # rejection sampling: objects do not touch, so every mask is whole
            h, w = rng.integers(d["min_size"], d["max_size"] + 1, size=2)
            y, x = rng.integers(0, s - h + 1), rng.integers(0, s - w + 1)
            if all(x > b[2] or x + w < b[0] or y > b[3] or y + h < b[1] for b in placed):
                break
        else:
            continue
        placed.append((x, y, x + w, y + h))
        kind = int(rng.integers(len(SHAPES)))
        masks[i, y : y + h, x : x + w] = shape_mask(kind, h, w, bool(rng.random() < 0.5))
        img[:, masks[i]] = rng.uniform(0.55, 1.0, size=(3, 1))  # any bright colour: colour says nothing of class
        ys, xs = np.nonzero(masks[i])
        boxes[i] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        labels[i] = kind + 1
    img += d["noise"] * rng.standard_normal(img.shape, dtype=np.float32)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8), masks, boxes, labels
