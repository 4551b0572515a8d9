// DAPE / DAPE V2 (Zheng et al. 2024; DAPE V2 Sec. 3.3) on CPU: both (1 x k) convolutions and
// the LeakyReLU between them fused, so the D-channel hidden map (the memory hog of the unfused
// version: D x B x T^2 floats, written and read several times per step) never leaves the cache.
// Forward and backward; the backward recomputes the hidden map instead of storing it.
//
// Causal mode: DAPE V2 as App. L writes it: tril once, on the input [S, bias], then Conv2d (1 x k,
// padding c = k // 2) -> LeakyReLU -> Conv2d on the full T x T map (the authors' code too:
// chuanyang-Zheng/DAPE, megatron/model/positional_embeddings.py, Kerple_DAPEV2.forward). Query row
// i is then an independent 1-D computation: input of length L = i + 1 (zero past it), hidden map
// of length Lh = min(L + c, T) (the c values past the diagonal are LeakyReLU(conv1's bias + the
// row's last inputs), read by conv2 on the diagonal; columns >= T are conv2's zero padding), and
// L outputs. Encoder mode: every row has length T (nothing zeroed), Lh = T. Rows are laid end to
// end in "strips" of a few hundred positions with 2c zeros between them, so one pass of the
// convolutions serves many short rows: the hidden values past a row read inputs up to 2c past it,
// which must be zeros, not the next row; the hidden map is zeroed after Lh (conv2's padding).
//
// The forward returns the processed logits A = S + bias + f([S, bias]) with -inf above the
// diagonal in causal mode (the attention mask, fused here to save two passes over B x H x T^2).
//
// Layouts (float32, contiguous): S, A, gA, gS (B, H, T, T); bias (1|B, H, T, T) with batch stride
// bias_bstride (0 = shared by the batch); w1 (D, C, k) with C = H (no bias) or 2H (input channels
// [S, bias]); b1 (D); w2 (H, D, k); b2 (H). gS / gbias are 0 above the diagonal.
//
// Plain C ABI for ctypes. Threads: OpenMP (else std::thread) over contiguous blocks of rows (a
// deterministic partition; per-thread weight-gradient partials are summed in thread order).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "parallel.h"

namespace {

// Register tiles of 4 channels x WB vectors of V lanes: 16 accumulators where the machine has 32
// vector registers (AVX-512), 8 where it has 16 (AVX2; SSE and NEON use 4-lane vectors).
#if defined(__AVX512F__)
constexpr int V = 16, WB = 4;
#elif defined(__AVX__)
constexpr int V = 8, WB = 2;
#else
constexpr int V = 4, WB = 2;
#endif
constexpr int VW = V * WB;
constexpr int STRIP = 512;  // target positions per strip (hidden map D x STRIP floats stays in L2)
typedef float vf __attribute__((vector_size(V * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(V * sizeof(float))));

inline vf loadu(const float *p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
inline void storeu(float *p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vi loadm(const int32_t *p) { vi v; std::memcpy(&v, p, sizeof v); return v; }
inline vf splat(float x) { return vf{} + x; }  // vector-scalar arithmetic broadcasts the scalar
#if defined(__GNUC__) && !defined(__clang__)
inline vf select(vi m, vf a, vf b) { return m ? a : b; }  // GCC's vector ?: (a blend / masked move)
#else
inline vf select(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
#endif
inline vf leaky(vf x) { const vf y = x * splat(0.01f); return select(x > y, x, y); }  // max(x, 0.01 x)
inline float hsum(vf v) { float s = 0; for (int l = 0; l < V; ++l) s += v[l]; return s; }
inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

struct Shape {
    int B, T, H, C, D, k, c, causal;
    int cap;  // strip capacity in positions (>= one full row + its 2c seam)
    int P;    // stride of one padded channel row in the workspaces: element e at [c + e], e in [-c, Ws + c)
};

Shape make_shape(int B, int T, int H, int C, int D, int k, int causal) {
    Shape sh{B, T, H, C, D, k, k / 2, causal, 0, 0};
    sh.cap = std::max(STRIP, T + 2 * sh.c);
    sh.P = round_up(sh.cap, VW) + 2 * sh.c + VW;
    return sh;
}

// ---- register-tiled micro-kernels (NB output channels x WB vectors of positions) ----

// y[n][w..] = sum_{m, s} W[n][m][s] * x[m][w + s - c] for n in [n0, n0 + NB); x rows padded
// (x + m * P + w + s is element w + s - c). W layout (N, M, k).
template <int NB>
inline void gather_tile(const float *W, int M, int k, int n0, const float *x, int P, int w, vf acc[NB][WB]) {
    for (int m = 0; m < M; ++m) {
        const float *xm = x + (size_t)m * P + w;
        const float *wm = W + ((size_t)n0 * M + m) * k;
        for (int s = 0; s < k; ++s) {
            vf xv[WB];
            for (int q = 0; q < WB; ++q) xv[q] = loadu(xm + s + q * V);
            for (int j = 0; j < NB; ++j) {
                const vf wv = splat(wm[(size_t)j * M * k + s]);
                for (int q = 0; q < WB; ++q) acc[j][q] += wv * xv[q];
            }
        }
    }
}

// The transpose: y[m][w..] = sum_{n, s} W[n][m][s] * g[n][w - s + c], for m in [m0, m0 + MB)
// (g + n * P + w + 2c - s is element w - s + c).
template <int MB>
inline void scatter_tile(const float *W, int N, int M, int k, int c, int m0, const float *g, int P, int w, vf acc[MB][WB]) {
    for (int n = 0; n < N; ++n) {
        const float *gn = g + (size_t)n * P + w + 2 * c;
        const float *wn = W + ((size_t)n * M + m0) * k;
        for (int s = 0; s < k; ++s) {
            vf gv[WB];
            for (int q = 0; q < WB; ++q) gv[q] = loadu(gn - s + q * V);
            for (int j = 0; j < MB; ++j) {
                const vf wv = splat(wn[(size_t)j * k + s]);
                for (int q = 0; q < WB; ++q) acc[j][q] += wv * gv[q];
            }
        }
    }
}

// Weight gradient of a convolution: G[n][m][s] += sum_e a[n][e] * x[m][e + s - c] over the
// strip (a rows at a + n * P + c, padded x rows as above), for n in [n0, n0 + NB).
template <int NB>
inline void correlate(const float *a, int n0, const float *x, int M, int k, int P, int c, int Ws, vf *G) {
    for (int m = 0; m < M; ++m)
        for (int s = 0; s < k; ++s) {
            vf acc[NB];
            for (int j = 0; j < NB; ++j) acc[j] = vf{};
            const float *xm = x + (size_t)m * P + s;
            for (int e = 0; e < Ws; e += V) {
                const vf xv = loadu(xm + e);
                for (int j = 0; j < NB; ++j) acc[j] += loadu(a + (size_t)(n0 + j) * P + c + e) * xv;
            }
            for (int j = 0; j < NB; ++j) G[((size_t)(n0 + j) * M + m) * k + s] += acc[j];
        }
}

template <class Tile4, class Tile1>
inline void by_blocks(int n, Tile4 t4, Tile1 t1) {  // blocks of 4 channels, then single ones
    int j = 0;
    for (; j + 4 <= n; j += 4) t4(j);
    for (; j < n; ++j) t1(j);
}

// ---- strips ----

struct Strip {
    std::vector<int> b, i, off, L;  // per row: batch, query index, first position, length
    int used = 0;                   // positions incl. the 2c zeros after each row
    int Ws = 0;                     // used, rounded up to a whole tile
    void clear() { b.clear(); i.clear(); off.clear(); L.clear(); used = 0; }
    int rows() const { return (int)b.size(); }
};

struct Workspace {  // one thread's strip buffers, channel rows of stride P
    std::vector<float> xb, hb, yb, gpb, gxb;  // inputs (C rows), hidden (D), outputs / output grads (H), hidden grads (D), input grads (C)
    std::vector<int32_t> valid;               // -1 where the hidden map is kept (a row + up to c after it), else 0
    std::vector<float> row;                   // one row of gA when the backward starts from softmax's output
    explicit Workspace(const Shape &s, bool backward)
        : xb((size_t)s.C * s.P), hb((size_t)s.D * s.P), yb((size_t)s.H * s.P),
          gpb(backward ? (size_t)s.D * s.P : 0), gxb(backward ? (size_t)s.C * s.P : 0), valid(s.P),
          row(backward ? s.T : 0) {}
};

// Pointer to row (b, i) of channel ch of a (B, H, T, T) tensor (or of the bias for ch >= H).
struct Rows {
    const Shape &sh;
    const float *S, *bias;
    int64_t bias_bstride;
    const float *in(int b, int i, int ch) const {
        const size_t TT = (size_t)sh.T * sh.T;
        if (ch < sh.H) return S + ((size_t)b * sh.H + ch) * TT + (size_t)i * sh.T;
        return bias + (size_t)b * bias_bstride + (size_t)(ch - sh.H) * TT + (size_t)i * sh.T;
    }
};

template <class F>  // float or const float
inline F *row_of(F *t, const Shape &sh, int b, int ch, int i) {
    return t + ((size_t)b * sh.H + ch) * sh.T * sh.T + (size_t)i * sh.T;
}

// Copy `n` channel rows of the strip's query rows into a padded buffer (zeros elsewhere).
template <class Src>
void load_strip(const Shape &sh, const Strip &st, int n, Src src, float *buf) {
    for (int ch = 0; ch < n; ++ch) {
        float *dst = buf + (size_t)ch * sh.P;
        std::memset(dst, 0, sizeof(float) * (st.Ws + 2 * sh.c + VW));
        for (int r = 0; r < st.rows(); ++r) std::memcpy(dst + sh.c + st.off[r], src(st.b[r], st.i[r], ch), sizeof(float) * st.L[r]);
    }
}

// Copy `n` channel rows from a strip buffer (element e at [c + e]) to the (B, H, T, T) rows,
// `fill` beyond each row's length.
template <class Dst>
void store_strip(const Shape &sh, const Strip &st, int n, Dst dst, const float *buf, float fill) {
    for (int ch = 0; ch < n; ++ch)
        for (int r = 0; r < st.rows(); ++r) {
            float *d = dst(st.b[r], st.i[r], ch);
            if (!d) continue;
            std::memcpy(d, buf + (size_t)ch * sh.P + sh.c + st.off[r], sizeof(float) * st.L[r]);
            std::fill(d + st.L[r], d + sh.T, fill);
        }
}

// The hidden positions of the full map: each row and the min(c, T - L) positions after it (the
// rest of its 2c seam and the strip's tail are conv2's zero padding).
void mark_valid(const Shape &sh, const Strip &st, int32_t *valid) {
    std::memset(valid, 0, sizeof(int32_t) * st.Ws);
    for (int r = 0; r < st.rows(); ++r)
        std::fill(valid + st.off[r], valid + st.off[r] + std::min(st.L[r] + sh.c, sh.T), -1);
}

// hb[d] = LeakyReLU(conv1(x))[d], zero where the full map has conv2's padding (see mark_valid).
// Masked = false for k = 1: a position outside the rows then only reaches outputs and gradients
// outside the rows (its output gradient is 0), so the zeroing can be skipped.
template <bool Masked>
void hidden_strip(const Shape &sh, const float *w1, const float *b1, const Strip &st, Workspace &ws) {
    const int C = sh.C, k = sh.k, P = sh.P, c = sh.c;
    float *hb = ws.hb.data();
    for (int w = 0; w < st.Ws; w += VW) {
        vi valid[WB];
        for (int q = 0; q < WB; ++q) valid[q] = Masked ? loadm(ws.valid.data() + w + q * V) : vi{} - 1;
        by_blocks(sh.D,
            [&](int d) {
                vf acc[4][WB];
                for (int j = 0; j < 4; ++j) for (int q = 0; q < WB; ++q) acc[j][q] = splat(b1[d + j]);
                gather_tile<4>(w1, C, k, d, ws.xb.data(), P, w, acc);
                for (int j = 0; j < 4; ++j) for (int q = 0; q < WB; ++q)
                    storeu(hb + (size_t)(d + j) * P + c + w + q * V, select(valid[q], leaky(acc[j][q]), vf{}));
            },
            [&](int d) {
                vf acc[1][WB];
                for (int q = 0; q < WB; ++q) acc[0][q] = splat(b1[d]);
                gather_tile<1>(w1, C, k, d, ws.xb.data(), P, w, acc);
                for (int q = 0; q < WB; ++q) storeu(hb + (size_t)d * P + c + w + q * V, select(valid[q], leaky(acc[0][q]), vf{}));
            });
    }
    for (int d = 0; d < sh.D; ++d) {  // padding read by conv2 / correlate
        std::memset(hb + (size_t)d * P, 0, sizeof(float) * c);
        std::memset(hb + (size_t)d * P + c + st.Ws, 0, sizeof(float) * (c + VW));
    }
}

void hidden_strip(const Shape &sh, const float *w1, const float *b1, const Strip &st, Workspace &ws) {
    if (sh.k > 1) hidden_strip<true>(sh, w1, b1, st, ws);
    else hidden_strip<false>(sh, w1, b1, st, ws);
}

void forward_strip(const Shape &sh, const float *w1, const float *b1, const float *w2, const float *b2,
                   const Strip &st, const Rows &rows, float *out, Workspace &ws) {
    const int H = sh.H, D = sh.D, k = sh.k, P = sh.P, c = sh.c;
    load_strip(sh, st, sh.C, [&](int b, int i, int ch) { return rows.in(b, i, ch); }, ws.xb.data());
    mark_valid(sh, st, ws.valid.data());
    hidden_strip(sh, w1, b1, st, ws);
    float *yb = ws.yb.data();
    const float *xb = ws.xb.data();
    const bool with_bias = sh.C > H;
    auto finish = [&](int o, int w, const vf a[WB]) {  // A = S + bias + f
        for (int q = 0; q < WB; ++q) {
            const size_t at = c + w + q * V;
            vf v = a[q] + loadu(xb + (size_t)o * P + at);
            if (with_bias) v += loadu(xb + (size_t)(H + o) * P + at);
            storeu(yb + (size_t)o * P + at, v);
        }
    };
    for (int w = 0; w < st.Ws; w += VW)
        by_blocks(H,
            [&](int o) {
                vf acc[4][WB];
                for (int j = 0; j < 4; ++j) for (int q = 0; q < WB; ++q) acc[j][q] = splat(b2[o + j]);
                gather_tile<4>(w2, D, k, o, ws.hb.data(), P, w, acc);
                for (int j = 0; j < 4; ++j) finish(o + j, w, acc[j]);
            },
            [&](int o) {
                vf acc[1][WB];
                for (int q = 0; q < WB; ++q) acc[0][q] = splat(b2[o]);
                gather_tile<1>(w2, D, k, o, ws.hb.data(), P, w, acc);
                finish(o, w, acc[0]);
            });
    store_strip(sh, st, H, [&](int b, int i, int ch) { return row_of(out, sh, b, ch, i); }, yb,
                -std::numeric_limits<float>::infinity());
}

struct Grads {  // one thread's partial weight gradients, as vectors (summed across lanes at the end)
    std::vector<vf> w1, b1, w2, b2;
    explicit Grads(const Shape &sh)
        : w1((size_t)sh.D * sh.C * sh.k, vf{}), b1(sh.D, vf{}), w2((size_t)sh.H * sh.D * sh.k, vf{}), b2(sh.H, vf{}) {}
};

// gout is dL/dA, or with `prob` (softmax(A) rows) dL/dP: then dL/dA = P (dL/dP - <dL/dP, P>)
// per row, computed here while the row is loaded (fusing softmax's backward: one pass over
// B x H x T^2 instead of three).
void backward_strip(const Shape &sh, const float *w1, const float *b1, const float *w2, const Strip &st, const Rows &rows,
                    const float *gout, const float *prob, float *gS, float *gbias, Workspace &ws, Grads &gr) {
    const int H = sh.H, C = sh.C, D = sh.D, k = sh.k, P = sh.P, c = sh.c, Ws = st.Ws;
    load_strip(sh, st, C, [&](int b, int i, int ch) { return rows.in(b, i, ch); }, ws.xb.data());
    mark_valid(sh, st, ws.valid.data());
    hidden_strip(sh, w1, b1, st, ws);  // recomputed, not stored by the forward
    float *gb = ws.yb.data(), *gpb = ws.gpb.data(), *hb = ws.hb.data(), *xb = ws.xb.data();
    load_strip(sh, st, H, [&](int b, int i, int ch) -> const float * {
        const float *g = row_of(gout, sh, b, ch, i);
        if (!prob) return g;
        const float *p = row_of(prob, sh, b, ch, i);
        const int L = sh.causal ? i + 1 : sh.T;  // the row's length, as Units lays it out
        vf acc{};  // <g, p> in V lanes (a float reduction is not vectorised without -ffast-math)
        int j = 0;
        for (; j + V <= L; j += V) acc += loadu(g + j) * loadu(p + j);
        float dot = hsum(acc);
        for (; j < L; ++j) dot += g[j] * p[j];
        float *ga = ws.row.data();
        for (int j = 0; j < L; ++j) ga[j] = p[j] * (g[j] - dot);
        return ga;
    }, gb);

    // conv2: bias and weights (gW2[o][d][s] += sum_e g[o][e] h[d][e + s - c])
    for (int o = 0; o < H; ++o)
        for (int e = 0; e < Ws; e += V) gr.b2[o] += loadu(gb + (size_t)o * P + c + e);
    by_blocks(H, [&](int o) { correlate<4>(gb, o, hb, D, k, P, c, Ws, gr.w2.data()); },
                 [&](int o) { correlate<1>(gb, o, hb, D, k, P, c, Ws, gr.w2.data()); });

    // hidden gradient through conv2^T and the LeakyReLU (past the diagonal too: conv2 reads those
    // values), zero where the hidden map is padding
    const bool masked = k > 1;  // see hidden_strip
    for (int w = 0; w < Ws; w += VW) {
        vi valid[WB];
        for (int q = 0; q < WB; ++q) valid[q] = masked ? loadm(ws.valid.data() + w + q * V) : vi{} - 1;
        auto finish = [&](int d, const vf a[WB]) {
            vf sum{};
            for (int q = 0; q < WB; ++q) {
                const vf h = loadu(hb + (size_t)d * P + c + w + q * V);
                vf gp = select(h > splat(0.0f), a[q], a[q] * splat(0.01f));
                if (masked) gp = select(valid[q], gp, vf{});
                storeu(gpb + (size_t)d * P + c + w + q * V, gp);
                sum += gp;
            }
            gr.b1[d] += sum;
        };
        by_blocks(D,
            [&](int d) {
                vf acc[4][WB] = {};
                scatter_tile<4>(w2, H, D, k, c, d, gb, P, w, acc);
                for (int j = 0; j < 4; ++j) finish(d + j, acc[j]);
            },
            [&](int d) {
                vf acc[1][WB] = {};
                scatter_tile<1>(w2, H, D, k, c, d, gb, P, w, acc);
                finish(d, acc[0]);
            });
    }
    for (int d = 0; d < D; ++d) {
        std::memset(gpb + (size_t)d * P, 0, sizeof(float) * c);
        std::memset(gpb + (size_t)d * P + c + Ws, 0, sizeof(float) * (c + VW));
    }

    // conv1 weights: gW1[d][m][s] += sum_e gp[d][e] x[m][e + s - c]
    by_blocks(D, [&](int d) { correlate<4>(gpb, d, xb, C, k, P, c, Ws, gr.w1.data()); },
                 [&](int d) { correlate<1>(gpb, d, xb, C, k, P, c, Ws, gr.w1.data()); });

    // input gradients: the direct path of A = S + bias + f (gA itself) plus conv1^T, stored for
    // the rows only (zero above the diagonal: tril)
    float *gx = ws.gxb.data();
    auto finish = [&](int m, int w, const vf a[WB]) {
        for (int q = 0; q < WB; ++q) {
            const size_t at = c + w + q * V;
            storeu(gx + (size_t)m * P + at, a[q] + loadu(gb + (size_t)(m % H) * P + at));
        }
    };
    for (int w = 0; w < Ws; w += VW)
        by_blocks(C,
            [&](int m) {
                vf acc[4][WB] = {};
                scatter_tile<4>(w1, D, C, k, c, m, gpb, P, w, acc);
                for (int j = 0; j < 4; ++j) finish(m + j, w, acc[j]);
            },
            [&](int m) {
                vf acc[1][WB] = {};
                scatter_tile<1>(w1, D, C, k, c, m, gpb, P, w, acc);
                finish(m, w, acc[0]);
            });
    store_strip(sh, st, C, [&](int b, int i, int ch) -> float * {
        if (ch < H) return row_of(gS, sh, b, ch, i);
        return gbias ? row_of(gbias, sh, b, ch - H, i) : nullptr;
    }, gx, 0.0f);
}

// Work units: causal mode pairs query rows r and T-1-r (equal work: T + 1 keys in all); encoder
// mode takes one full row per unit. Each thread walks its units in order, filling strips.
struct Units {
    const Shape &sh;
    int per_batch() const { return sh.causal ? (sh.T + 1) / 2 : sh.T; }
    long total() const { return (long)sh.B * per_batch(); }
    template <class F>
    void each_strip(long u0, long u1, F f) const {
        Strip st;
        auto add = [&](int b, int i, int L) {
            if (st.rows() && st.used + L + 2 * sh.c > sh.cap) { flush(st, f); }
            st.b.push_back(b); st.i.push_back(i); st.off.push_back(st.used); st.L.push_back(L);
            st.used += L + 2 * sh.c;
        };
        for (long u = u0; u < u1; ++u) {
            const int b = (int)(u / per_batch()), r = (int)(u % per_batch());
            if (!sh.causal) { add(b, r, sh.T); continue; }
            add(b, r, r + 1);
            if (sh.T - 1 - r != r) add(b, sh.T - 1 - r, sh.T - r);
        }
        if (st.rows()) flush(st, f);
    }
    template <class F>
    static void flush(Strip &st, F f) {
        st.Ws = round_up(st.used, VW);
        f(st);
        st.clear();
    }
};

using synthlab::clamp_threads;
using synthlab::parallel_units;

}  // namespace

extern "C" {

const char *dape_isa() { return synthlab::isa_name(); }

int dape_abi_version() { return 5; }

int dape_forward(const float *S, const float *bias, int64_t bias_bstride, float *out, const float *w1, const float *b1,
                 const float *w2, const float *b2, int B, int T, int H, int C, int D, int k, int causal, int nthreads) {
    const Shape sh = make_shape(B, T, H, C, D, k, causal);
    const Units units{sh};
    const Rows rows{sh, S, bias, bias_bstride};
    parallel_units(units.total(), clamp_threads(nthreads, units.total()), [&](int, long u0, long u1) {
        Workspace ws(sh, false);
        units.each_strip(u0, u1, [&](const Strip &st) { forward_strip(sh, w1, b1, w2, b2, st, rows, out, ws); });
    });
    return 0;
}

// gS (B, H, T, T) always written; gbias (B, H, T, T) written when not null (the caller sums it
// over the batch when the bias was shared); gw1, gb1, gw2, gb2 overwritten. With `prob` not null
// (softmax of the forward's output), gout is the gradient of the probabilities.
int dape_backward(const float *S, const float *bias, int64_t bias_bstride, const float *gout, const float *prob,
                  float *gS, float *gbias,
                  const float *w1, const float *b1, const float *w2, float *gw1, float *gb1, float *gw2, float *gb2,
                  int B, int T, int H, int C, int D, int k, int causal, int nthreads) {
    const Shape sh = make_shape(B, T, H, C, D, k, causal);
    const Units units{sh};
    const Rows rows{sh, S, bias, bias_bstride};
    const int nt = clamp_threads(nthreads, units.total());
    std::vector<Grads> parts;
    parts.reserve(nt);
    for (int t = 0; t < nt; ++t) parts.emplace_back(sh);
    parallel_units(units.total(), nt, [&](int t, long u0, long u1) {
        Workspace ws(sh, true);
        units.each_strip(u0, u1, [&](const Strip &st) {
            backward_strip(sh, w1, b1, w2, st, rows, gout, prob, gS, gbias, ws, parts[t]);
        });
    });
    auto reduce = [&](float *dst, std::vector<vf> Grads::*field) {  // in thread order: deterministic
        const size_t n = (parts[0].*field).size();
        for (size_t i = 0; i < n; ++i) {
            float s = 0;
            for (int t = 0; t < nt; ++t) s += hsum((parts[t].*field)[i]);
            dst[i] = s;
        }
    };
    reduce(gw1, &Grads::w1);
    reduce(gb1, &Grads::b1);
    reduce(gw2, &Grads::w2);
    reduce(gb2, &Grads::b2);
    return 0;
}

}  // extern "C"
