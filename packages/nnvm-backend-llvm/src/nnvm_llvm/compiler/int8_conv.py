"""2-D ``conv_integer`` as a direct AVX512-VNNI convolution written in TIR (8 lanes wide with
AVX2's exact emulation of ``vpdpbusd``, see ``int8_gemm.vnni_dot``).

Why: the integer conv was the float ``conv2d`` template on operands widened to int32 (16
multiply-adds per instruction); ``vpdpbusd`` does 64. ddddocr's 21 ConvInteger layers took
8 ms where onnxruntime (im2col + MLAS's u8s8 VNNI GEMM) takes 4.5.

Layout: the input is copied once per call into ``(B, S, C4, Hp, Wq, 4)`` bytes: channels in
groups of 4 (the 4 bytes one ``vpdpbusd`` lane multiplies), spatially padded with the zero
point, each row split into its ``S = stride_w`` column phases. Then 16 consecutive outputs
of a row read 64 contiguous bytes for every tap, stride or not, and no im2col buffer
(``K x pixels`` bytes) is written. Weights are packed at load (``conv2d_vnni``:
``(OC, C4 + 1, KH, KW, 4)``, uint8 stored as ``w - 128``, the extra group holding each
filter's sum) and broadcast, 4 bytes per output
channel and tap. The register tile is ``mr`` output channels x up to 4 vectors of 16
pixels of one output row, a row's remainder of up to 8 pixels in one 8-lane (ymm) vector
(ddddocr's 20-wide rows filled 20 of 32 lanes, now 20 of 24); rows are the parallel axis.

The zero points and the shifts come out at the end (see ``int8_gemm``):
``y = P' - (tx + zx) * colsum(w') + (s - zw) * (rowsum(x') - K (tx + zx))`` where
``rowsum(x')`` is each output pixel's window sum (a ``vpdpbusd`` against bytes of 1), the
spatial padding holding ``zx + tx`` so that it contributes exactly 0, as onnxruntime pads.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from .int8_gemm import LANES, bcast, flat, ramp, tir_body, vnni_dot
from .schedules import PARALLEL_MIN_WORK

#: int32 accumulators one register tile may hold (32 zmm registers, a few for the operands)
MAX_ACC = 24


def _ceil(n: int, m: int) -> int:
    return -(-n // m)


class _Conv:
    """Emits one NCHW conv_integer (groups 1): see the module docstring."""

    def __init__(self, x, wq, xzp, wzp, y, attrs, lanes: int):
        self.L, self.emulate = lanes, lanes != LANES
        self.b, self.c, self.h, self.w = (int(d) for d in x.shape)
        _, self.oc, self.oh, self.ow = (int(d) for d in y.shape)
        self.c4, self.kh, self.kw = int(wq.shape[1]) - 1, int(wq.shape[2]), int(wq.shape[3])
        pads = attrs["pads"]
        self.pt, self.pl = pads[0], pads[1]
        self.sh, self.sw = attrs["strides"]
        self.dh, self.dw = attrs["dilations"]
        self.hp = max(self.h + self.pt + pads[2], (self.oh - 1) * self.sh +
                      (self.kh - 1) * self.dh + 1)
        # the row in zmm vectors of 16 pixels, a remainder of up to 8 in one ymm vector
        full, rem = divmod(self.ow, lanes)
        half = lanes // 2 if rem <= lanes // 2 and not self.emulate else lanes
        self.widths = [lanes] * full + ([half] if rem else [])
        # each phase row: every vector of every tap stays inside it
        self.wq_len = sum(self.widths) + (self.kw - 1) * self.dw // self.sw
        self.x, self.wq, self.xzp, self.wzp, self.y = x, wq, xzp, wzp, y
        self.tx = 128 if str(x.dtype) == "int8" else 0
        self.s = 128 if str(wq.dtype) == "uint8" else 0
        self.k = self.c * self.kh * self.kw
        self.taps = (self.c4 + 1) * self.kh * self.kw  # per filter, with its sum group
        self.wq32 = flat(wq, self.oc * self.taps, "int32")
        self.nv = min(len(self.widths), 4)
        fits = [m for m in (8, 6, 4) if m * self.nv <= MAX_ACC]
        # output channels per tile: a divisor if one fits, else the widest with a tail tile
        self.mr = next((m for m in fits if self.oc % m == 0), min(fits[0], self.oc))

    def zx(self):
        return self.xzp[(0,) * len(self.xzp.shape)].astype("int32")

    def zw(self, o):
        if len(self.wzp.shape) == 0 or int(self.wzp.shape[0]) == 1:
            return self.wzp[(0,) * len(self.wzp.shape)].astype("int32")
        return self.wzp[o].astype("int32")

    # -- phases -----------------------------------------------------------------------
    def pack_input(self):
        """``(B, S, C4, Hp, Wq)`` int32 words of 4 channel bytes: phase ``p`` column ``q``
        is padded column ``q * S + p``; the zero point (+ shift) outside the image, 0 in
        padded channels. The border is filled first, then the image rows are copied, one
        plain loop per phase row that LLVM vectorises (strided loads, contiguous stores)."""
        b, c, h, w, s, c4, hp, wq = (self.b, self.c, self.h, self.w, self.sw, self.c4,
                                     self.hp, self.wq_len)
        xf = flat(self.x, b * c * h * w)
        xq = T.alloc_buffer((b * s * c4 * hp * wq,), "int32")
        pad = (self.zx() + self.tx) & 0xFF
        last = c - 4 * (c4 - 1)  # real channels in the last group

        def word(byte_of, n_real):
            v = byte_of(0)
            for j in range(1, n_real):
                v = v | (byte_of(j) << (8 * j))
            return v

        full, part = word(lambda j: pad, 4), word(lambda j: pad, last)
        with T.serial(0, b * s * c4 * hp) as row:
            fill = full if last == 4 else tirx.Select(row // hp % c4 == c4 - 1, part, full)
            with T.serial(0, wq) as q:
                T.buffer_store(xq, fill, [row * wq + q])
        for ph in range(s):
            q_lo = max(0, _ceil(self.pl - ph, s))  # first phase column inside the image
            q_hi = min(wq, _ceil(w + self.pl - ph, s))
            if q_hi <= q_lo:
                continue
            with T.serial(0, b * c4 * h) as img_row:
                ih = img_row % h
                ci = img_row // h % c4
                bi = img_row // h // c4
                dst = (((bi * s + ph) * c4 + ci) * hp + ih + self.pt) * wq

                def byte_of(j, q, bi=bi, ci=ci, ih=ih):
                    ch = tirx.min(ci * 4 + j, c - 1)
                    v = (xf[((bi * c + ch) * h + ih) * w + q * s + ph - self.pl]
                         .astype("int32") + self.tx) & 0xFF
                    return v if j < last else tirx.Select(ci < c4 - 1, v, tirx.const(0, "int32"))

                with T.serial(q_lo, q_hi) as q:
                    T.buffer_store(xq, word(lambda j, q=q: byte_of(j, q), 4), [dst + q])
        return xq

    def x_vec(self, xq32, bi, oh, col, width, ci, r, t):
        """``width`` output pixels from ``col`` of row ``oh`` x channel group ``ci``, tap
        (r, t)."""
        ph = (t * self.dw) % self.sw
        ih = oh * self.sh + r * self.dh
        base = (((bi * self.sw + ph) * self.c4 + ci) * self.hp + ih) * self.wq_len
        return xq32[ramp(base + col + (t * self.dw) // self.sw, width)]

    def body(self):
        xq32 = self.pack_input()
        zsum = tirx.const(self.tx, "int32") + self.zx()
        work = self.b * self.oh * self.ow * self.oc * self.k
        loop = T.parallel if work >= PARALLEL_MIN_WORK and self.b * self.oh > 1 else T.serial
        nv, widths = self.nv, self.widths
        with loop(0, self.b * self.oh) as row:
            bi, oh = row // self.oh, row % self.oh
            loops = (len(widths) - 1) // nv  # chunks of nv whole vectors, then the rest
            if loops:
                with T.serial(0, loops) as ch:
                    self.chunk(xq32, zsum, bi, oh, ch * nv * self.L, widths[:nv], False)
            self.chunk(xq32, zsum, bi, oh, loops * nv * self.L, widths[loops * nv:], True)

    def chunk(self, xq32, zsum, bi, oh, col0, widths, last):
        """Pixel vectors of ``widths`` from column ``col0`` of one output row (``last``: the
        row's last, whose final vector may reach past the row), every output channel."""
        offs = [sum(widths[:v]) for v in range(len(widths))]
        rs = T.alloc_buffer((sum(widths),), "int32", scope="local")
        for o, w in zip(offs, widths):
            T.buffer_store(rs, bcast(tirx.const(0, "int32"), w), [ramp(o, w)])
        with T.serial(0, self.c4) as ci:
            with T.serial(0, self.kh) as r:
                for t in range(self.kw):
                    for o, w in zip(offs, widths):
                        x = self.x_vec(xq32, bi, oh, col0 + o, w, ci, r, t)
                        ones = bcast(tirx.const(0x01010101, "int32"), w)
                        T.buffer_store(rs, vnni_dot(rs[ramp(o, w)], x, ones, w, self.emulate),
                                       [ramp(o, w)])
        for o, w in zip(offs, widths):  # rowsum(x') - K (tx + zx)
            T.buffer_store(rs, rs[ramp(o, w)] - bcast(tirx.const(self.k, "int32") * zsum, w),
                           [ramp(o, w)])
        mr = self.mr
        tiles, rest = divmod(self.oc, mr)
        args = (xq32, zsum, rs, bi, oh, col0, widths, offs, last)
        with T.serial(0, tiles) as to:
            self.tile(*args, to * mr, mr)
        if rest:
            self.tile(*args, tiles * mr, rest)

    def tile(self, xq32, zsum, rs, bi, oh, col0, widths, offs, last, o0, mr):
        kh, kw = self.kh, self.kw
        n = sum(widths)
        acc = T.alloc_buffer((mr * n,), "int32", scope="local")
        for i in range(mr):
            for o, w in zip(offs, widths):
                T.buffer_store(acc, bcast(tirx.const(0, "int32"), w), [ramp(i * n + o, w)])
        with T.serial(0, self.c4) as ci:
            with T.serial(0, kh) as r:
                for t in range(kw):
                    xs = [self.x_vec(xq32, bi, oh, col0 + o, w, ci, r, t)
                          for o, w in zip(offs, widths)]
                    for i in range(mr):
                        wv = self.wq32[(o0 + i) * self.taps + (ci * kh + r) * kw + t]
                        for x, o, w in zip(xs, offs, widths):
                            idx = ramp(i * n + o, w)
                            T.buffer_store(acc, vnni_dot(acc[idx], x, bcast(wv, w), w,
                                                         self.emulate), [idx])
        plane = self.oh * self.ow
        yf = flat(self.y, self.b * self.oc * plane)
        for i in range(mr):
            oc = o0 + i
            # the filter's sum: its extra channel group, at tap (0, 0)
            corr = zsum * self.wq32[oc * self.taps + self.c4 * self.kh * self.kw]
            scale = tirx.const(self.s, "int32") - self.zw(oc)
            base = (bi * self.oc + oc) * plane + oh * self.ow + col0
            for v, (o, w) in enumerate(zip(offs, widths)):
                val = acc[ramp(i * n + o, w)] - bcast(corr, w) + bcast(scale, w) * \
                    rs[ramp(o, w)]
                valid = self.ow % self.L if last and v == len(widths) - 1 else 0
                if not valid or valid == w:
                    T.buffer_store(yf, val, [ramp(base + o, w)])
                    continue
                tmp = T.alloc_buffer((w,), "int32", scope="local")  # the lanes in the row
                T.buffer_store(tmp, val, [ramp(0, w)])
                with T.serial(0, valid) as j:
                    T.buffer_store(yf, tmp[j], [base + o + j])


def conv_integer_vnni(x, wq, xzp, wzp, out_shape, attrs: dict, lanes: int, name: str):
    """The int32 TE tensor of one 2-D ``conv_integer`` (weight packed ``conv2d_vnni``),
    ``lanes``-wide vectors (``int8_gemm.int8_lanes``)."""
    body = tir_body(name, lambda i, o: _Conv(*i, o[0], attrs, lanes).body())
    return te.extern(tuple(out_shape), [x, wq, xzp, wzp], body, name=name, dtype="int32")
