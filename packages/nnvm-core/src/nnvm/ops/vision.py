"""Detection ops with ONNX semantics: non_max_suppression, roi_align, max_roi_pool.

``non_max_suppression`` returns exactly ONNX's ``[num_selected, 3]`` int64 triples
``(batch, class, box)``; how many depends on the scores, so its shape rule leaves the output
unknown and the op carries ``TDynamicShape=True`` (no invented upper bound). The reference
interpreter runs it; static backends need the output shape and cannot.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..op import OpPattern, OpSet
from ..params import Param

defs = OpSet("vision")

OPAQUE = OpPattern.OPAQUE


def _corners(boxes, center_point_box):
    """(y1, x1, y2, x2) with y1 <= y2 and x1 <= x2, from either ONNX box format."""
    if center_point_box:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=-1)


def _iou(a, b):
    """IoU of boxes ``a`` and ``b``, each given as its four coordinate arrays (y1, x1, y2, x2)
    (broadcast); 0 where a box or the union is empty (onnxruntime's rule). Computed in the
    boxes' dtype with onnxruntime's operations in its order: float32 boxes give its float32
    values, so a box whose IoU lies within rounding of the threshold is decided as it does."""
    (ay1, ax1, ay2, ax2), (by1, bx1, by2, bx2) = a, b
    ih = np.minimum(ay2, by2) - np.maximum(ay1, by1)
    iw = np.minimum(ax2, bx2) - np.maximum(ax1, bx1)
    inter = np.maximum(ih, 0) * np.maximum(iw, 0)
    area_a = (ay2 - ay1) * (ax2 - ax1)
    area_b = (by2 - by1) * (bx2 - bx1)
    union = area_a + area_b - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((area_a > 0) & (area_b > 0) & (union > 0), inter / union, 0.0)


def _iou_matrix(a, b):
    """IoU of every box of ``a`` (k, 4) with every box of ``b`` (m, 4), as (k, m)."""
    return _iou(a.T[:, :, None], b.T[:, None, :])


def _greedy_keep(corners, order, iou_t, limit, block=256):
    """Greedy NMS over ``order`` (indices, best first): keep a box unless its IoU with a kept
    one exceeds ``iou_t``. Why blocks: candidates are tested against every box kept so far
    in one array operation per block, and only a block's own boxes greedily one by one, so
    thousands of boxes (a detector's batched-class trick) cost matrix work, not one Python
    step per kept box over all the rest."""
    kept = np.empty(0, dtype=np.int64)
    for start in range(0, order.size, block):
        if kept.size >= limit:
            break
        cand = order[start:start + block]
        if kept.size:
            cand = cand[~(_iou_matrix(corners[kept], corners[cand]) > iou_t).any(axis=0)]
        if not cand.size:
            continue
        inner = ~(_iou_matrix(corners[cand], corners[cand]) > iou_t)
        alive = np.ones(cand.size, dtype=bool)
        picked: list[int] = []
        for i in range(cand.size):
            if alive[i]:
                picked.append(i)
                if kept.size + len(picked) >= limit:
                    break
                alive[i + 1:] &= inner[i, i + 1:]
        kept = np.concatenate([kept, cand[picked]])
    return kept


#: most candidate pairs (boxes close enough in y to pass the IoU threshold) that
#: ``_overlap_keep`` tests before it gives way to ``_greedy_keep`` (dense, heavily overlapping
#: boxes, where comparing with the kept boxes only is cheaper): bounds its time
_MAX_PAIRS = 4_000_000
#: pairs tested per block: a block's temporaries stay in the CPU cache, where whole-list
#: arrays of tens of megabytes cost more in fresh pages than in arithmetic (3x slower)
_PAIR_BLOCK = 1 << 15
#: rounds of ``_greedy_from_pairs`` settled in array operations before the rest (a long chain
#: of boxes each suppressing the next) is settled one box at a time
_MAX_ROUNDS = 32


def _overlap_keep(corners, order, iou_t, limit):
    """Greedy NMS from the list of box pairs whose IoU exceeds ``iou_t``, or None when there
    are too many candidate pairs. Why: a detector's post-processing runs NMS over thousands of
    boxes spread over the image (and over per-class offsets, torchvision's batched-NMS trick),
    few of which come close: finding the pairs by a sort on y and testing only those beats
    comparing all pairs."""
    if order.size == 0 or not iou_t >= 0 or not np.isfinite(corners[order]).all():
        return None  # a negative threshold suppresses disjoint boxes too; NaN compares false
    pairs = _suppressing_pairs(corners[order], iou_t)  # positions 0..n-1 are score ranks
    if pairs is None:
        return None
    return order[_greedy_from_pairs(*pairs, order.size)[:limit]]


def _suppressing_pairs(box, iou_t):
    """``(src, dst)``: every pair of boxes (rows of ``box``, best score first) whose IoU
    exceeds ``iou_t``, ``src`` the better-ranked; None past ``_MAX_PAIRS`` candidates.

    Candidates: after a sort on y1, box q (y1[q] >= y1[p]) can pass against box p only if
    it starts early enough, as IoU <= intersection height / height of p; ``reach`` is that
    bound in float64 with slack for rounding (float32 IoU is within 1e-6 of the exact one),
    so a pair it drops has IoU <= ``iou_t`` however computed."""
    n = len(box)
    by_y = np.argsort(box[:, 0], kind="stable")
    coords = tuple(np.ascontiguousarray(c) for c in box[by_y].T)
    y1, y2 = coords[0].astype(np.float64), coords[2].astype(np.float64)
    h = y2 - y1
    reach = y2 - float(iou_t) * h * (1 - 1e-5) + 1e-9 * (np.abs(y2) + h)
    counts = np.maximum(np.searchsorted(y1, reach, side="left") - np.arange(1, n + 1), 0)
    ends = np.cumsum(counts)
    if ends[-1] > _MAX_PAIRS:
        return None
    src, dst = [], []
    r0 = 0
    while r0 < n:  # rows r0..r1-1 and the rows after each that it may overlap
        base = int(ends[r0 - 1]) if r0 else 0
        r1 = max(int(np.searchsorted(ends, base + _PAIR_BLOCK, side="right")), r0 + 1)
        rows_here = np.arange(r0, r1)
        c = counts[r0:r1]
        rows = np.repeat(rows_here, c)
        cols = np.arange(int(ends[r1 - 1]) - base) + np.repeat(rows_here + 1 - (np.cumsum(c) - c),
                                                             c)
        hit = _iou([v[rows] for v in coords], [v[cols] for v in coords]) > iou_t
        a, b = by_y[rows[hit]], by_y[cols[hit]]
        src.append(np.minimum(a, b))
        dst.append(np.maximum(a, b))
        r0 = r1
    return np.concatenate(src), np.concatenate(dst)


def _greedy_from_pairs(src, dst, n):
    """Score ranks (0 = best) that greedy NMS keeps among ``n`` boxes, where box ``src[i]``
    suppresses ``dst[i]`` if kept. Why rounds: a box is kept once every box that could
    suppress it is suppressed, and suppressed once one of them is kept; a round settles every
    box it can in array operations, so Python loops over rounds (the longest chain of
    suppressions, about ten in a detector's output) instead of over thousands of boxes."""
    kept = np.zeros(n, dtype=bool)
    open_ = np.ones(n, dtype=bool)  # not decided yet
    for _ in range(_MAX_ROUNDS):
        blocked = np.zeros(n, dtype=bool)
        blocked[dst] = True
        new = open_ & ~blocked
        kept |= new
        open_ &= ~new
        open_[dst[new[src]]] = False  # suppressed by a box kept now
        live = open_[src] & open_[dst]
        src, dst = src[live], dst[live]
        if not src.size:
            return np.flatnonzero(kept | open_)
    srt = np.argsort(src, kind="stable")
    src, dst = src[srt], dst[srt]
    start = np.searchsorted(src, np.arange(n + 1))
    for i in np.flatnonzero(open_):  # rank order: a box still open here is kept
        if open_[i]:
            kept[i] = True
            open_[dst[start[i]:start[i + 1]]] = False
    return np.flatnonzero(kept)


def _nms_ref(attrs, boxes, scores):
    limit = attrs["max_output_boxes_per_class"]
    # onnxruntime's arithmetic: boxes and threshold in float32 (ONNX boxes are float32)
    ftype = np.float64 if boxes.dtype == np.float64 else np.float32
    iou_t, score_t = ftype(attrs["iou_threshold"]), attrs["score_threshold"]
    out = []
    corners = _corners(boxes.astype(ftype, copy=False), attrs["center_point_box"])
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c].astype(np.float64)
            cand = np.arange(s.size) if score_t is None else np.nonzero(s > score_t)[0]
            cand = cand[np.argsort(-s[cand], kind="stable")]  # ties: lower index first
            keep = _overlap_keep(corners[b], cand, iou_t, limit)
            if keep is None:
                keep = _greedy_keep(corners[b], cand, iou_t, limit)
            triples = np.empty((len(keep), 3), dtype=np.int64)
            triples[:, 0], triples[:, 1], triples[:, 2] = b, c, keep
            out.append(triples)
    return np.concatenate(out) if out else np.empty((0, 3), dtype=np.int64)


def _nms_shape(attrs, ins, outs):
    bx, sc = ins
    if bx is not None and sc is not None and (bx[0] != sc[0] or bx[1] != sc[2]):
        raise ShapeError(f"boxes {bx} and scores {sc} disagree: expected boxes (B, N, 4) "
                         f"with scores (B, C, N)")
    return ins, outs


defs.op_once("non_max_suppression", doc="ONNX NonMaxSuppression: per batch and class, greedily "
              "keep the best-scoring boxes whose IoU with every kept box is <= iou_threshold. "
              "Output int64 (num_selected, 3), known only at run time.",
              inputs=("boxes", "scores"),
              params=[Param("max_output_boxes_per_class", "int", 0, "limit per class"),
                      Param("iou_threshold", "float", 0.0, "suppress IoU above this"),
                      Param("score_threshold", "any", None, "drop scores <= this (None = keep "
                                                            "all)"),
                      Param("center_point_box", "int", 0, "0: corners; 1: center, size",
                            (0, 1))],
              shape=_nms_shape, dtype=lambda attrs, ins, outs: (ins, ["int64"]),
              reference=_nms_ref, pattern=OPAQUE, TDynamicShape=True, support_level=5)


# -- roi_align ----------------------------------------------------------------------------------

def _bilinear_taps(coord, size):
    """Per sample: low/high index, weights, validity (ONNX / Caffe2 RoiAlign rules)."""
    valid = (coord >= -1.0) & (coord <= size)
    c = np.maximum(coord, 0.0)
    low = np.floor(c).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    c = np.where(edge, low, c)
    frac = c - low
    return low, high, 1.0 - frac, frac, valid


def _roi_align_ref(attrs, x, rois, batch_indices):
    oh, ow, sr = attrs["output_height"], attrs["output_width"], attrs["sampling_ratio"]
    half = attrs["coordinate_transformation_mode"] == "half_pixel"
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, oh, ow), dtype=np.float64)
    off = 0.5 if half else 0.0
    for r, (roi, bi) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        x0, y0, x1, y1 = roi * attrs["spatial_scale"] - off
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = sr if sr > 0 else int(np.ceil(rh / oh))
        gw = sr if sr > 0 else int(np.ceil(rw / ow))
        ys = y0 + np.arange(oh)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh
        xs = x0 + np.arange(ow)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw
        yl, yh_, wy0, wy1, vy = _bilinear_taps(ys.reshape(-1), h)  # (oh*gh,)
        xl, xh_, wx0, wx1, vx = _bilinear_taps(xs.reshape(-1), w)  # (ow*gw,)
        img = x[int(bi)].astype(np.float64)  # (c, h, w)
        valid = vy[:, None] & vx[None, :]
        taps = [(yl, xl, wy0[:, None] * wx0[None, :]), (yl, xh_, wy0[:, None] * wx1[None, :]),
                (yh_, xl, wy1[:, None] * wx0[None, :]), (yh_, xh_, wy1[:, None] * wx1[None, :])]
        vals = [img[:, yy][:, :, xx] * np.where(valid, wt, 0.0) for yy, xx, wt in taps]
        if attrs["mode"] == "avg":
            s = sum(vals).reshape(c, oh, gh, ow, gw)
            out[r] = s.sum(axis=(2, 4)) / max(gh * gw, 1)
        else:
            s = np.maximum.reduce(vals).reshape(c, oh, gh, ow, gw)
            out[r] = s.max(axis=(2, 4))
    return out.astype(x.dtype)


def _roi_shape(attrs, ins, outs):
    x, rois = ins[0], ins[1]
    if x is None or rois is None:
        return ins, outs
    new_ins = list(ins)
    if len(ins) > 2:
        new_ins[2] = (rois[0],)
    return new_ins, [(rois[0], x[1], attrs["output_height"], attrs["output_width"])]


defs.op_once("roi_align", doc="ONNX RoiAlign: bilinear average (or max) pooling of each region "
              "of interest (x1, y1, x2, y2) into output_height x output_width bins.",
              inputs=("data", "rois", "batch_indices"),
              params=[Param("mode", "str", "avg", "avg or max", ("avg", "max")),
                      Param("output_height", "int", 1, "bins"),
                      Param("output_width", "int", 1, "bins"),
                      Param("sampling_ratio", "int", 0, "samples per bin; 0 = adaptive"),
                      Param("spatial_scale", "float", 1.0, "roi -> feature map scale"),
                      Param("coordinate_transformation_mode", "str", "half_pixel",
                            "pixel shift", ("half_pixel", "output_half_pixel"))],
              shape=_roi_shape,
              dtype=lambda attrs, ins, outs: ([ins[0], ins[0], ins[2] or "int64"], [ins[0]]),
              reference=_roi_align_ref, pattern=OPAQUE, support_level=5)


def _max_roi_pool_ref(attrs, x, rois):
    ph, pw = attrs["pooled_shape"]
    scale = attrs["spatial_scale"]
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, ph, pw), dtype=x.dtype)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        x0, y0, x1, y1 = (np.round(roi[1:5] * scale)).astype(np.int64)
        rh, rw = max(y1 - y0 + 1, 1), max(x1 - x0 + 1, 1)
        for i in range(ph):
            hs = min(max(y0 + int(np.floor(i * rh / ph)), 0), h)
            he = min(max(y0 + int(np.ceil((i + 1) * rh / ph)), 0), h)
            for j in range(pw):
                ws = min(max(x0 + int(np.floor(j * rw / pw)), 0), w)
                we = min(max(x0 + int(np.ceil((j + 1) * rw / pw)), 0), w)
                if he > hs and we > ws:
                    out[r, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
    return out


defs.op_once("max_roi_pool", doc="ONNX MaxRoiPool: max over each bin of each region of "
              "interest (batch, x1, y1, x2, y2); empty bins give 0.", inputs=("data", "rois"),
              params=[Param("pooled_shape", "ints", doc="(height, width)"),
                      Param("spatial_scale", "float", 1.0, "roi -> feature map scale")],
              shape=lambda attrs, ins, outs: (ins, outs if None in ins else [
                  (ins[1][0], ins[0][1]) + tuple(attrs["pooled_shape"])]),
              dtype=lambda attrs, ins, outs: (ins, [ins[0]]), reference=_max_roi_pool_ref,
              pattern=OPAQUE, support_level=5)
