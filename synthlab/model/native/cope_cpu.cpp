// CoPE (Golovneva et al. 2024, Sec. 4, App. B Listing 1) positions and interpolation on CPU,
// fused per query row: p_ij = sum_{t=j..i} g_it (a reverse scan), clamped to npos - 1, then
// z_ij = e_lo + (p - lo) (e_lo+1 - e_lo) with e = q_i . pos_emb (the "table", npos values per
// row; the last one repeats past npos - 1), or z_ij = -m_h p_ij for CoPE-ALiBi. The PyTorch
// version of the same walks B x H x T^2 tensors about a dozen times (cumsum, floor, two gathers
// and their scatter_add backward); here each row is read and written once each way.
//
// Layouts (float32, contiguous): gates (B, H, T, T) = sigmoid(logits), read on and below the
// diagonal only (causal: the future gates are 0 by definition); table (B, H, T, npos) or null;
// slopes (H) for CoPE-ALiBi or null; out / ggates (B, H, T, T), 0 above the diagonal; gtable
// (B, H, T, npos). Past the clamp (p > npos - 1) the interpolation reads the last entry twice
// (high == low, w == 0), so no gradient flows through p there, as with torch.clamp.
//
// cope_attention_*: the whole attention weights of a layer whose only position term is CoPE,
// softmax_j(S_ij + z_ij) over j <= i with the gates sigmoid(G_ij) made here (G = S, or the
// separate gate logits of sep_keys), so the gates, the summed logits and their masked copy never
// go to memory; the backward fuses softmax's, the interpolation's, the scan's and the sigmoid's.
//
// cope_qkv_*: the whole attention of such a layer from q, k, v (B, H, T, D), flash-attention
// style: no (T, T) tensor at all. Per query row the scores q_i k_j scale (j <= i only: the
// causal half), gates, positions, softmax and y_i = sum_j a_ij v_j are made in cache; the
// forward keeps each row's log-sum-exp, and the backward recomputes the row from it and
// accumulates dq, dk, dv, the table's gradient in the same pass. Work unit: one batch element,
// every head (its keys and values transposed once; the heads' scans interleaved as above).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "parallel.h"

namespace {

struct Shape {
    int B, H, T, npos;
    size_t row(int b, int h, int i) const { return (((size_t)b * H + h) * T + i) * T; }
    size_t table_row(int b, int h, int i) const { return (((size_t)b * H + h) * T + i) * npos; }
};

// Work unit u = (b, r): query rows r and T-1-r of every head (T + 1 keys in all, so units cost
// the same); heads are processed together, four reverse scans interleaved for instruction-level
// parallelism (each scan is a chain of dependent adds).
template <class Row>
void each_row(const Shape &sh, long u, Row row) {
    const int per = (sh.T + 1) / 2, b = (int)(u / per), r = (int)(u % per);
    row(b, r);
    if (sh.T - 1 - r != r) row(b, sh.T - 1 - r);
}

// Running sums over the H rows of one query, four heads interleaved: Reverse, out[h][j] =
// sum_{t=j..L-1} in[h][t] (the positions from the gates); else out[h][j] = sum_{t=0..j} in[h][t]
// (the gates' gradient from the positions').
template <bool Reverse>
void running_sums(const float *const *in, float *const *out, int H, int L) {
    int h = 0;
    for (; h + 4 <= H; h += 4) {
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int k = 0; k < L; ++k) {
            const int j = Reverse ? L - 1 - k : k;
            a0 += in[h][j]; out[h][j] = a0;
            a1 += in[h + 1][j]; out[h + 1][j] = a1;
            a2 += in[h + 2][j]; out[h + 2][j] = a2;
            a3 += in[h + 3][j]; out[h + 3][j] = a3;
        }
    }
    for (; h < H; ++h) {
        float a = 0;
        for (int k = 0; k < L; ++k) {
            const int j = Reverse ? L - 1 - k : k;
            a += in[h][j]; out[h][j] = a;
        }
    }
}

inline void suffix_sums(const float *const *g, float *const *p, int H, int L) { running_sums<true>(g, p, H, L); }
inline void prefix_sums(const float *const *d, float *const *out, int H, int L) { running_sums<false>(d, out, H, L); }

// min / max of two floats by value: a select that vectorises on every width (std::min returns a
// reference, which keeps the loops around it scalar on AVX2: "control flow in loop")
inline float fmin2(float a, float b) { return b < a ? b : a; }
inline float fmax2(float a, float b) { return a < b ? b : a; }
inline int imin2(int a, int b) { return b < a ? b : a; }

// exp(x) for x in [-87, 88] (clamped there), relative error ~2e-7: Cephes' expf polynomial with
// the 2^n scale built from the exponent bits; plain arithmetic, so loops over it vectorise
// (std::exp does not without -ffast-math). Needs the default rounding mode and no reassociation.
inline float exp_approx(float x) {
    x = fmin2(fmax2(x, -87.0f), 88.0f);
    // n = round(x / ln 2) by the 1.5 * 2^23 shift (std::floor vectorises only with -fno-trapping-math)
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln 2 in two parts
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * __builtin_bit_cast(float, ((int32_t)n + 127) << 23);  // 2^n
}

// max and sum of x[0..L) in eight lanes (a fixed order: the same bits every run), so they
// vectorise without -ffast-math's reassociation
inline float row_max(const float *x, int L) {
    float m[8] = {-3.4e38f, -3.4e38f, -3.4e38f, -3.4e38f, -3.4e38f, -3.4e38f, -3.4e38f, -3.4e38f};
    int j = 0;
    for (; j + 8 <= L; j += 8)
        for (int l = 0; l < 8; ++l) m[l] = fmax2(m[l], x[j + l]);
    for (; j < L; ++j) m[0] = fmax2(m[0], x[j]);
    return fmax2(fmax2(fmax2(m[0], m[1]), fmax2(m[2], m[3])), fmax2(fmax2(m[4], m[5]), fmax2(m[6], m[7])));
}

inline float row_sum(const float *x, int L) {
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= L; j += 8)
        for (int l = 0; l < 8; ++l) a[l] += x[j + l];
    for (; j < L; ++j) a[0] += x[j];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

struct Workspace {
    // positions (H x T), their gradient (H x T), table gradient (npos); the fused attention's
    // gates and the gradient of the summed logits (H x T each)
    std::vector<float> p, dp, gtab, gate, dA;
    std::vector<const float *> g;
    std::vector<float *> prow, dprow, grow, darow, out;  // out: rows of a caller's tensor
    explicit Workspace(const Shape &sh)
        : p((size_t)sh.H * sh.T), dp((size_t)sh.H * sh.T), gtab(sh.npos), gate((size_t)sh.H * sh.T),
          dA((size_t)sh.H * sh.T), g(sh.H), prow(sh.H), dprow(sh.H), grow(sh.H), darow(sh.H), out(sh.H) {
        for (int h = 0; h < sh.H; ++h) {
            const size_t o = (size_t)h * sh.T;
            prow[h] = p.data() + o; dprow[h] = dp.data() + o; grow[h] = gate.data() + o; darow[h] = dA.data() + o;
        }
    }
};

// query(sh, b, i, ws) for every query row i of every batch b, over the threads, one workspace each
template <class Query>
void every_query(const Shape &sh, int nthreads, Query query) {
    const long total = (long)sh.B * ((sh.T + 1) / 2);
    synthlab::parallel_units(total, synthlab::clamp_threads(nthreads, total), [&](int, long u0, long u1) {
        Workspace ws(sh);
        for (long u = u0; u < u1; ++u) each_row(sh, u, [&](int b, int i) { query(sh, b, i, ws); });
    });
}

#ifdef __AVX512F__
// A table row of npos <= 64 entries held in four registers: the entries around sixteen positions
// at a time by permutes (gathers measured slower than the scalar loop on Zen 4)
struct TableRow {
    __m512 t0, t1, t2, t3, ftop;
    __m512i itop;
    static __mmask16 first(int n) { return n >= 16 ? (__mmask16)0xFFFF : n > 0 ? (__mmask16)((1u << n) - 1) : (__mmask16)0; }
    TableRow(const float *e, int top)
        : t0(_mm512_maskz_loadu_ps(first(top + 1), e)), t1(_mm512_maskz_loadu_ps(first(top - 15), e + 16)),
          t2(_mm512_maskz_loadu_ps(first(top - 31), e + 32)), t3(_mm512_maskz_loadu_ps(first(top - 47), e + 48)),
          ftop(_mm512_set1_ps((float)top)), itop(_mm512_set1_epi32(top)) {}
    __m512 lookup(__m512i idx) const {  // e[idx], idx in [0, 64): bit 4 picks within a pair, bit 5 the pair
        const __m512 lo32 = _mm512_permutex2var_ps(t0, idx, t1), hi32 = _mm512_permutex2var_ps(t2, idx, t3);
        return _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), lo32, hi32);
    }
    // positions p -> the entries below and above the clamped position, and its fraction w
    void interpolate(__m512 p, __m512 &low, __m512 &high, __m512 &w) const {
        const __m512 pc = _mm512_min_ps(p, ftop);
        const __m512i lo = _mm512_cvttps_epi32(pc);  // pc >= 0: truncation is the floor
        w = _mm512_sub_ps(pc, _mm512_cvtepi32_ps(lo));
        low = lookup(lo);
        high = lookup(_mm512_min_epi32(_mm512_add_epi32(lo, _mm512_set1_epi32(1)), itop));
    }
};
#elif defined(__AVX2__)
// The same for AVX2: a table row of npos <= 64 entries in up to eight registers of eight, and
// the row shifted by one (the entry above each, the last repeating), so that one permute within
// each register and the blends between them give both entries around eight positions (two
// gathers measured 10-15 % slower than the scalar loop on Zen 4)
struct TableRow {
    __m256 t[8], s[8], ftop;
    __m256i itop;
    int n;  // registers in use
    TableRow(const float *e, int top) : ftop(_mm256_set1_ps((float)top)), itop(_mm256_set1_epi32(top)), n(top / 8 + 1) {
        for (int r = 0; r < n; ++r) {
            float lo[8], hi[8];
            for (int l = 0; l < 8; ++l) {
                lo[l] = e[imin2(8 * r + l, top)];
                hi[l] = e[imin2(8 * r + l + 1, top)];
            }
            t[r] = _mm256_loadu_ps(lo);
            s[r] = _mm256_loadu_ps(hi);
        }
    }
    // positions p -> the entries below and above the clamped position, and its fraction w
    void interpolate(__m256 p, __m256 &low, __m256 &high, __m256 &w) const {
        const __m256 pc = _mm256_min_ps(p, ftop);
        const __m256i lo = _mm256_cvttps_epi32(pc);  // pc >= 0: truncation is the floor
        w = _mm256_sub_ps(pc, _mm256_cvtepi32_ps(lo));
        low = _mm256_permutevar8x32_ps(t[0], lo);  // the low three bits pick within a register
        high = _mm256_permutevar8x32_ps(s[0], lo);
        for (int r = 1; r < n; ++r) {
            const __m256 here = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lo, _mm256_set1_epi32(8 * r - 1)));
            low = _mm256_blendv_ps(low, _mm256_permutevar8x32_ps(t[r], lo), here);
            high = _mm256_blendv_ps(high, _mm256_permutevar8x32_ps(s[r], lo), here);
        }
    }
};
#endif

// interpolated table logits (or -m p for CoPE-ALiBi) of positions p[0..L): z[j]
inline void position_logits(const float *p, const float *e, float m, int top, int L, float *z) {
    if (e) {
        int j = 0;
#ifdef __AVX512F__
        if (top < 64) {
            const TableRow t(e, top);
            for (; j < L; j += 16) {
                const __mmask16 k = TableRow::first(L - j);
                __m512 low, high, w;
                t.interpolate(_mm512_maskz_loadu_ps(k, p + j), low, high, w);
                _mm512_mask_storeu_ps(z + j, k, _mm512_fmadd_ps(w, _mm512_sub_ps(high, low), low));
            }
        }
#elif defined(__AVX2__)
        if (top < 64) {
            const TableRow t(e, top);
            for (; j + 8 <= L; j += 8) {
                __m256 low, high, w;
                t.interpolate(_mm256_loadu_ps(p + j), low, high, w);
                _mm256_storeu_ps(z + j, _mm256_fmadd_ps(w, _mm256_sub_ps(high, low), low));
            }
        }
#endif
        for (; j < L; ++j) {
            const float pc = fmin2(p[j], (float)top);
            const int lo = (int)pc;  // pc >= 0: truncation is the floor
            const float w = pc - (float)lo, low = e[lo], high = e[imin2(lo + 1, top)];
            z[j] = low + w * (high - low);
        }
    } else {
        for (int j = 0; j < L; ++j) z[j] = m * fmin2(p[j], (float)top);
    }
}

// The table row's gradient from the logits' dz[0..L): gt[lo] += dz (1 - w), gt[hi] += dz w, a
// scatter. Neighbouring keys mostly share a cell (the positions fall by a gate, < 1, per key), so
// one running sum would wait on its own last store at every key: NACC copies of the row, key j
// into copy j % NACC, are summed at the end (a fixed order: the same bits every run).
constexpr int NACC = 4;
inline void table_gradient(const float *p, const float *dz, int top, int npos, int L, float *gt) {
    if (npos > 64) {
        std::fill(gt, gt + npos, 0.0f);
        for (int j = 0; j < L; ++j) {
            const float pc = fmin2(p[j], (float)top);
            const int lo = (int)pc, hi = imin2(lo + 1, top);
            const float w = pc - (float)lo;
            gt[lo] += dz[j] - dz[j] * w;  // z = low + w (high - low)
            gt[hi] += dz[j] * w;
        }
        return;
    }
    float acc[NACC][64] = {};
    int j = 0;
    for (; j + NACC <= L; j += NACC)
        for (int c = 0; c < NACC; ++c) {
            const float pc = fmin2(p[j + c], (float)top);
            const int lo = (int)pc, hi = imin2(lo + 1, top);
            const float w = pc - (float)lo, d = dz[j + c];
            acc[c][lo] += d - d * w;
            acc[c][hi] += d * w;
        }
    for (int c = 0; j < L; ++j, ++c) {
        const float pc = fmin2(p[j], (float)top);
        const int lo = (int)pc, hi = imin2(lo + 1, top);
        const float w = pc - (float)lo, d = dz[j];
        acc[c][lo] += d - d * w;
        acc[c][hi] += d * w;
    }
    for (int k = 0; k < npos; ++k) gt[k] = (acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]);
}

// the gradient of position_logits: dp[j] from dz[j]; the table row's gradient into gt (npos)
inline void position_logits_backward(const float *p, const float *e, float m, int top, int npos, int L,
                                     const float *dz, float *dp, float *gt) {
    if (e) {
        int j = 0;
#ifdef __AVX512F__
        if (top < 64) {
            const TableRow t(e, top);
            for (; j < L; j += 16) {
                const __mmask16 k = TableRow::first(L - j);
                __m512 low, high, w;
                t.interpolate(_mm512_maskz_loadu_ps(k, p + j), low, high, w);
                _mm512_mask_storeu_ps(dp + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dz + j), _mm512_sub_ps(high, low)));
            }
        }
#elif defined(__AVX2__)
        if (top < 64) {
            const TableRow t(e, top);
            for (; j + 8 <= L; j += 8) {
                __m256 low, high, w;
                t.interpolate(_mm256_loadu_ps(p + j), low, high, w);
                _mm256_storeu_ps(dp + j, _mm256_mul_ps(_mm256_loadu_ps(dz + j), _mm256_sub_ps(high, low)));
            }
        }
#endif
        for (; j < L; ++j) {
            const float pc = fmin2(p[j], (float)top);
            const int lo = (int)pc, hi = imin2(lo + 1, top);
            dp[j] = dz[j] * (e[hi] - e[lo]);
        }
        table_gradient(p, dz, top, npos, L, gt);
    } else {
        for (int j = 0; j < L; ++j) dp[j] = p[j] <= (float)top ? m * dz[j] : 0.0f;  // the clamp's gradient
    }
}

// gates sigmoid(G) of query row i for every head, and their suffix sums (the positions)
void gates_and_positions(const Shape &sh, const float *G, int b, int i, Workspace &ws) {
    const int L = i + 1;
    for (int h = 0; h < sh.H; ++h) {
        const float *gl = G + sh.row(b, h, i);
        float *g = ws.grow[h];
        for (int j = 0; j < L; ++j) g[j] = 1.0f / (1.0f + exp_approx(-gl[j]));
        ws.g[h] = g;
    }
    suffix_sums(ws.g.data(), ws.prow.data(), sh.H, L);
}

void attention_forward_query(const Shape &sh, const float *S, const float *G, const float *table,
                             const float *slopes, float *att, int b, int i, Workspace &ws) {
    const int L = i + 1, top = sh.npos - 1;
    gates_and_positions(sh, G, b, i, ws);
    for (int h = 0; h < sh.H; ++h) {
        const float *s = S + sh.row(b, h, i);
        float *o = att + sh.row(b, h, i);
        position_logits(ws.prow[h], table ? table + sh.table_row(b, h, i) : nullptr, slopes ? -slopes[h] : 0.0f,
                        top, L, o);
        for (int j = 0; j < L; ++j) o[j] += s[j];
        const float mx = row_max(o, L);
        for (int j = 0; j < L; ++j) o[j] = exp_approx(o[j] - mx);
        const float inv = 1.0f / row_sum(o, L);
        for (int j = 0; j < L; ++j) o[j] *= inv;
        std::memset(o + L, 0, sizeof(float) * (sh.T - L));
    }
}

// gS = dA (+ the gates' gradient when G is S); gG = the gates' gradient (sep_keys) or null
void attention_backward_query(const Shape &sh, const float *G, const float *table,
                              const float *slopes, const float *att, const float *gatt, float *gS, float *gG,
                              float *gtable, int b, int i, Workspace &ws) {
    const int L = i + 1, T = sh.T, top = sh.npos - 1;
    gates_and_positions(sh, G, b, i, ws);  // recomputed, not stored by the forward
    for (int h = 0; h < sh.H; ++h) {
        const float *a = att + sh.row(b, h, i), *ga = gatt + sh.row(b, h, i);
        float *dA = ws.darow[h];
        for (int j = 0; j < L; ++j) dA[j] = a[j] * ga[j];
        const float dot = row_sum(dA, L);
        for (int j = 0; j < L; ++j) dA[j] = a[j] * (ga[j] - dot);  // softmax's backward
        position_logits_backward(ws.prow[h], table ? table + sh.table_row(b, h, i) : nullptr,
                                 slopes ? -slopes[h] : 0.0f, top, sh.npos, L, dA, ws.dprow[h], ws.gtab.data());
        if (table) std::memcpy(gtable + sh.table_row(b, h, i), ws.gtab.data(), sizeof(float) * sh.npos);
    }
    // d g_t = sum_{j <= t} d p_j, into p's buffer (the positions are no longer needed)
    for (int h = 0; h < sh.H; ++h) ws.g[h] = ws.dprow[h];
    prefix_sums(ws.g.data(), ws.prow.data(), sh.H, L);
    for (int h = 0; h < sh.H; ++h) {
        const float *dg = ws.prow[h], *g = ws.grow[h], *dA = ws.darow[h];
        float *os = gS + sh.row(b, h, i);
        if (gG) {
            float *og = gG + sh.row(b, h, i);
            for (int j = 0; j < L; ++j) { os[j] = dA[j]; og[j] = dg[j] * g[j] * (1.0f - g[j]); }
            std::memset(og + L, 0, sizeof(float) * (T - L));
        } else {
            for (int j = 0; j < L; ++j) os[j] = dA[j] + dg[j] * g[j] * (1.0f - g[j]);
        }
        std::memset(os + L, 0, sizeof(float) * (T - L));
    }
}

void forward_query(const Shape &sh, const float *gates, const float *table, const float *slopes, float *out,
                   int b, int i, Workspace &ws) {
    const int L = i + 1, top = sh.npos - 1;
    for (int h = 0; h < sh.H; ++h) ws.g[h] = gates + sh.row(b, h, i);
    suffix_sums(ws.g.data(), ws.prow.data(), sh.H, L);
    for (int h = 0; h < sh.H; ++h) {
        float *o = out + sh.row(b, h, i);
        position_logits(ws.prow[h], table ? table + sh.table_row(b, h, i) : nullptr, slopes ? -slopes[h] : 0.0f,
                        top, L, o);
        std::memset(o + L, 0, sizeof(float) * (sh.T - L));
    }
}

void backward_query(const Shape &sh, const float *gates, const float *table, const float *slopes, const float *gout,
                    float *ggates, float *gtable, int b, int i, Workspace &ws) {
    const int L = i + 1, top = sh.npos - 1;
    for (int h = 0; h < sh.H; ++h) ws.g[h] = gates + sh.row(b, h, i);
    suffix_sums(ws.g.data(), ws.prow.data(), sh.H, L);  // recomputed, not stored by the forward
    for (int h = 0; h < sh.H; ++h) {
        position_logits_backward(ws.prow[h], table ? table + sh.table_row(b, h, i) : nullptr,
                                 slopes ? -slopes[h] : 0.0f, top, sh.npos, L, gout + sh.row(b, h, i), ws.dprow[h],
                                 ws.gtab.data());
        if (table) std::memcpy(gtable + sh.table_row(b, h, i), ws.gtab.data(), sizeof(float) * sh.npos);
    }
    // d g_t = sum_{j <= t} d p_j
    for (int h = 0; h < sh.H; ++h) { ws.g[h] = ws.dprow[h]; ws.out[h] = ggates + sh.row(b, h, i); }
    prefix_sums(ws.g.data(), ws.out.data(), sh.H, L);
    for (int h = 0; h < sh.H; ++h) std::memset(ggates + sh.row(b, h, i) + L, 0, sizeof(float) * (sh.T - L));
}


// ---- cope_qkv: fused from q, k, v ----

constexpr int BLK = 16;  // the transposed keys' and values' rows are padded to a multiple of this

struct QKV {
    int B, H, T, D, npos, Tp;  // Tp: T rounded up to BLK (the transposed rows' stride)
    float scale;
    size_t head(int b, int h) const { return ((size_t)b * H + h) * T; }  // first row of (b, h)
};

struct QKVWorkspace {
    // per head: keys and values transposed (D x Tp, zero past T); scores, gates, positions,
    // weights, the weights' and positions' gradients of the current row (T each)
    std::vector<float> kt, vt, s, g, p, a, dz, dp;
    std::vector<const float *> gptr;
    std::vector<float *> pptr, dgptr;
    explicit QKVWorkspace(const QKV &sh, bool backward)
        : kt((size_t)sh.H * sh.D * sh.Tp), vt(backward ? (size_t)sh.H * sh.D * sh.Tp : 0), s((size_t)sh.H * sh.T),
          g((size_t)sh.H * sh.T), p((size_t)sh.H * sh.T), a((size_t)sh.H * sh.T), dz(backward ? (size_t)sh.H * sh.T : 0),
          dp(backward ? (size_t)sh.H * sh.T : 0), gptr(sh.H), pptr(sh.H), dgptr(sh.H) {
        for (int h = 0; h < sh.H; ++h) {
            gptr[h] = g.data() + (size_t)h * sh.T;
            pptr[h] = p.data() + (size_t)h * sh.T;
        }
    }
};

// xt[d * Tp + j] = x[j * D + d] for one head's (T, D) rows; zero for j in [T, Tp)
inline void transpose_rows(const float *x, float *xt, int T, int D, int Tp) {
    for (int d = 0; d < D; ++d) {
        float *o = xt + (size_t)d * Tp;
        for (int j = 0; j < T; ++j) o[j] = x[(size_t)j * D + d];
        for (int j = T; j < Tp; ++j) o[j] = 0.0f;
    }
}

// One vector of V floats at the machine's own width (GCC / clang vector extension), and KCH
// independent accumulator chains per loop (an FMA's latency over its issue interval): AVX-512 16
// lanes x 4 chains; AVX2 8 x 8 (16 registers); SSE / NEON 4 x 8. A vector type wider than the
// machine's is lowered by GCC through the stack (a 16-float type on AVX2: 4x slower).
#if defined(__AVX512F__)
constexpr int V = 16, KCH = 4;
#elif defined(__AVX__)
constexpr int V = 8, KCH = 8;
#else
constexpr int V = 4, KCH = 8;
#endif
static_assert(BLK % V == 0, "the transposed rows' padding must cover a whole vector");
typedef float vf __attribute__((vector_size(V * sizeof(float))));
inline vf loadv(const float *p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
inline void storev(float *p, vf v) { std::memcpy(p, &v, sizeof v); }

// out[j0 .. j0 + N V) = sum_d c[d] xt[d][..]: N vectors of keys, N independent chains
template <int N>
inline void dot_block(const float *c, const float *xt, int D, int Tp, int j0, float *out) {
    vf a[N] = {};
    for (int d = 0; d < D; ++d) {
        const float cd = c[d], *x = xt + (size_t)d * Tp + j0;
        for (int q = 0; q < N; ++q) a[q] += cd * loadv(x + q * V);
    }
    for (int q = 0; q < N; ++q) storev(out + q * V, a[q]);
}

// out[j] = sum_d c[d] xt[d][j] for j < L: KCH vectors of keys at a time, then the rest in
// halving blocks (a row shorter than KCH vectors still has several chains); the last vector
// reads into the zero padding and is stored through a buffer
inline void dot_rows(const float *c, const float *xt, int D, int Tp, int L, float *out) {
    const int whole = L / V * V;  // keys in whole vectors, stored directly
    int j0 = 0;
    for (; j0 + KCH * V <= whole; j0 += KCH * V) dot_block<KCH>(c, xt, D, Tp, j0, out + j0);
    if (KCH >= 8 && j0 + 4 * V <= whole) { dot_block<4>(c, xt, D, Tp, j0, out + j0); j0 += 4 * V; }
    if (KCH >= 4 && j0 + 2 * V <= whole) { dot_block<2>(c, xt, D, Tp, j0, out + j0); j0 += 2 * V; }
    if (j0 + V <= whole) { dot_block<1>(c, xt, D, Tp, j0, out + j0); j0 += V; }
    if (j0 < L) {
        float tmp[V];
        dot_block<1>(c, xt, D, Tp, j0, tmp);
        std::memcpy(out + j0, tmp, sizeof(float) * (L - j0));
    }
}

// out[d0 .. d0 + NC V) = sum_{j < L} w[j] x[j][..] (x: (T, D) rows): NC column vectors times
// K keys' chains, summed in a fixed tree at the end
template <int NC, int K>
inline void weighted_block(const float *w, const float *x, int D, int L, int d0, float *out) {
    vf a[K][NC] = {};
    const float *xd = x + d0;
    int j = 0;
    for (; j + K <= L; j += K)
        for (int q = 0; q < K; ++q)
            for (int c = 0; c < NC; ++c) a[q][c] += w[j + q] * loadv(xd + (size_t)(j + q) * D + c * V);
    for (; j < L; ++j)
        for (int c = 0; c < NC; ++c) a[0][c] += w[j] * loadv(xd + (size_t)j * D + c * V);
    for (int n = K / 2; n > 0; n /= 2)
        for (int q = 0; q < n; ++q)
            for (int c = 0; c < NC; ++c) a[q][c] += a[q + n][c];
    for (int c = 0; c < NC; ++c) storev(out + d0 + c * V, a[0][c]);
}

constexpr int half_chains(int n) { return n > 1 ? n / 2 : 1; }

// out[d] = sum_{j < L} w[j] x[j][d]: every column vector of a row in one pass over the keys
// where a head has up to four (KCH accumulators in all), else four at a time
inline void weighted_rows(const float *w, const float *x, int D, int L, float *out) {
    int d0 = 0;
    const int nc = D / V;
    if (nc == 1) weighted_block<1, KCH>(w, x, D, L, 0, out), d0 = V;
    else if (nc == 2) weighted_block<2, half_chains(KCH)>(w, x, D, L, 0, out), d0 = 2 * V;
    else if (nc == 3) weighted_block<3, half_chains(half_chains(KCH))>(w, x, D, L, 0, out), d0 = 3 * V;
    else
        for (; d0 + 4 * V <= D; d0 += 4 * V) weighted_block<4, half_chains(half_chains(KCH))>(w, x, D, L, d0, out);
    for (; d0 + V <= D; d0 += V) weighted_block<1, KCH>(w, x, D, L, d0, out);
    for (; d0 < D; ++d0) {  // head sizes not a multiple of V
        float acc = 0.0f;
        for (int j = 0; j < L; ++j) acc += w[j] * x[(size_t)j * D + d0];
        out[d0] = acc;
    }
}

// x[j][d] += w[j] c[d] and y[j][d] += u[j] e[d] for j < L: both gradients of a key in one pass,
// up to four column vectors each held in registers
template <int NC>
inline void add_outer_block(const float *w, const float *c, const float *u, const float *e, int D, int L, int d0,
                            float *x, float *y) {
    vf cv[NC], ev[NC];
    for (int k = 0; k < NC; ++k) { cv[k] = loadv(c + d0 + k * V); ev[k] = loadv(e + d0 + k * V); }
    for (int j = 0; j < L; ++j) {
        float *xj = x + (size_t)j * D + d0, *yj = y + (size_t)j * D + d0;
        for (int k = 0; k < NC; ++k) {
            storev(xj + k * V, loadv(xj + k * V) + w[j] * cv[k]);
            storev(yj + k * V, loadv(yj + k * V) + u[j] * ev[k]);
        }
    }
}

inline void add_outer2(const float *w, const float *c, const float *u, const float *e, int D, int L, float *x,
                       float *y) {
    int d0 = 0;
    for (; d0 + 4 * V <= D; d0 += 4 * V) add_outer_block<4>(w, c, u, e, D, L, d0, x, y);
    if (d0 + 2 * V <= D) { add_outer_block<2>(w, c, u, e, D, L, d0, x, y); d0 += 2 * V; }
    if (d0 + V <= D) { add_outer_block<1>(w, c, u, e, D, L, d0, x, y); d0 += V; }
    for (; d0 < D; ++d0)
        for (int j = 0; j < L; ++j) {
            x[(size_t)j * D + d0] += w[j] * c[d0];
            y[(size_t)j * D + d0] += u[j] * e[d0];
        }
}

// query row i of batch b, every head: scores s (the scaled q . k over j <= i), gates g, positions p
void qkv_row_positions(const QKV &sh, const float *q, int b, int i, QKVWorkspace &ws, float *qs) {
    const int L = i + 1, D = sh.D;
    for (int h = 0; h < sh.H; ++h) {
        const float *qi = q + (sh.head(b, h) + i) * D;
        for (int d = 0; d < D; ++d) qs[d] = qi[d] * sh.scale;  // (q scale) . k, as the PyTorch path
        float *s = ws.s.data() + (size_t)h * sh.T, *g = ws.g.data() + (size_t)h * sh.T;
        dot_rows(qs, ws.kt.data() + (size_t)h * D * sh.Tp, D, sh.Tp, L, s);
        for (int j = 0; j < L; ++j) g[j] = 1.0f / (1.0f + exp_approx(-s[j]));
    }
    suffix_sums(ws.gptr.data(), ws.pptr.data(), sh.H, L);
}

void qkv_forward_batch(const QKV &sh, const float *q, const float *k, const float *v, const float *table,
                       const float *slopes, float *y, float *lse, int b, QKVWorkspace &ws) {
    const int D = sh.D, top = sh.npos - 1;
    std::vector<float> qs(D);
    for (int h = 0; h < sh.H; ++h)
        transpose_rows(k + sh.head(b, h) * D, ws.kt.data() + (size_t)h * D * sh.Tp, sh.T, D, sh.Tp);
    for (int i = 0; i < sh.T; ++i) {
        const int L = i + 1;
        qkv_row_positions(sh, q, b, i, ws, qs.data());
        for (int h = 0; h < sh.H; ++h) {
            const size_t r = sh.head(b, h) + i;
            float *a = ws.a.data() + (size_t)h * sh.T;
            const float *s = ws.s.data() + (size_t)h * sh.T;
            position_logits(ws.pptr[h], table ? table + r * sh.npos : nullptr, slopes ? -slopes[h] : 0.0f, top, L, a);
            for (int j = 0; j < L; ++j) a[j] += s[j];
            const float mx = row_max(a, L);
            for (int j = 0; j < L; ++j) a[j] = exp_approx(a[j] - mx);
            const float sum = row_sum(a, L), inv = 1.0f / sum;
            for (int j = 0; j < L; ++j) a[j] *= inv;
            lse[r] = mx + std::log(sum);
            weighted_rows(a, v + sh.head(b, h) * D, D, L, y + r * D);
        }
    }
}

void qkv_backward_batch(const QKV &sh, const float *q, const float *k, const float *v, const float *table,
                        const float *slopes, const float *lse, const float *gy, float *gq, float *gk, float *gv,
                        float *gtable, int b, QKVWorkspace &ws) {
    const int D = sh.D, T = sh.T, top = sh.npos - 1;
    std::vector<float> qs(D), dqi(D);
    for (int h = 0; h < sh.H; ++h) {
        transpose_rows(k + sh.head(b, h) * D, ws.kt.data() + (size_t)h * D * sh.Tp, T, D, sh.Tp);
        transpose_rows(v + sh.head(b, h) * D, ws.vt.data() + (size_t)h * D * sh.Tp, T, D, sh.Tp);
        std::fill(gk + sh.head(b, h) * D, gk + (sh.head(b, h) + T) * D, 0.0f);
        std::fill(gv + sh.head(b, h) * D, gv + (sh.head(b, h) + T) * D, 0.0f);
    }
    for (int i = 0; i < T; ++i) {
        const int L = i + 1;
        qkv_row_positions(sh, q, b, i, ws, qs.data());  // recomputed, not stored by the forward
        for (int h = 0; h < sh.H; ++h) {
            const size_t r = sh.head(b, h) + i, o = (size_t)h * T;
            float *a = ws.a.data() + o, *dz = ws.dz.data() + o;
            const float *s = ws.s.data() + o, *gyi = gy + r * D, *e = table ? table + r * sh.npos : nullptr;
            position_logits(ws.pptr[h], e, slopes ? -slopes[h] : 0.0f, top, L, a);
            for (int j = 0; j < L; ++j) a[j] = exp_approx(a[j] + s[j] - lse[r]);  // the forward's weights
            dot_rows(gyi, ws.vt.data() + (size_t)h * D * sh.Tp, D, sh.Tp, L, dz);  // dA_j = gy_i . v_j
            for (int j = 0; j < L; ++j) ws.dp[o + j] = a[j] * dz[j];
            const float dot = row_sum(ws.dp.data() + o, L);
            for (int j = 0; j < L; ++j) dz[j] = a[j] * (dz[j] - dot);  // softmax's backward: d logits
            position_logits_backward(ws.pptr[h], e, slopes ? -slopes[h] : 0.0f, top, sh.npos, L, dz, ws.dp.data() + o,
                                     gtable ? gtable + r * sh.npos : nullptr);
            ws.dgptr[h] = ws.dp.data() + o;
        }
        // d g_t = sum_{j <= t} d p_j, into the positions' buffer (no longer needed)
        prefix_sums(ws.dgptr.data(), ws.pptr.data(), sh.H, L);
        for (int h = 0; h < sh.H; ++h) {
            const size_t r = sh.head(b, h) + i, o = (size_t)h * T;
            const float *g = ws.g.data() + o, *dg = ws.p.data() + o, *a = ws.a.data() + o;
            float *ds = ws.dz.data() + o;
            for (int j = 0; j < L; ++j) ds[j] = (ds[j] + dg[j] * g[j] * (1.0f - g[j])) * sh.scale;  // d (q . k)
            weighted_rows(ds, k + sh.head(b, h) * D, D, L, dqi.data());
            float *gqi = gq + r * D;
            for (int d = 0; d < D; ++d) gqi[d] = dqi[d];
            add_outer2(ds, q + r * D, a, gy + r * D, D, L, gk + sh.head(b, h) * D, gv + sh.head(b, h) * D);
        }
    }
}

}  // namespace

extern "C" {

const char *cope_isa() { return synthlab::isa_name(); }

int cope_abi_version() { return 3; }

int cope_forward(const float *gates, const float *table, const float *slopes, float *out, int B, int H, int T,
                 int npos, int nthreads) {
    every_query(Shape{B, H, T, npos}, nthreads, [&](const Shape &sh, int b, int i, Workspace &ws) {
        forward_query(sh, gates, table, slopes, out, b, i, ws);
    });
    return 0;
}

int cope_backward(const float *gates, const float *table, const float *slopes, const float *gout, float *ggates,
                  float *gtable, int B, int H, int T, int npos, int nthreads) {
    every_query(Shape{B, H, T, npos}, nthreads, [&](const Shape &sh, int b, int i, Workspace &ws) {
        backward_query(sh, gates, table, slopes, gout, ggates, gtable, b, i, ws);
    });
    return 0;
}

// G: the gate logits, or null when they are S itself
int cope_attention_forward(const float *S, const float *G, const float *table, const float *slopes, float *att,
                           int B, int H, int T, int npos, int nthreads) {
    every_query(Shape{B, H, T, npos}, nthreads, [&](const Shape &sh, int b, int i, Workspace &ws) {
        attention_forward_query(sh, S, G ? G : S, table, slopes, att, b, i, ws);
    });
    return 0;
}

int cope_attention_backward(const float *S, const float *G, const float *table, const float *slopes,
                            const float *att, const float *gatt, float *gS, float *gG, float *gtable, int B, int H,
                            int T, int npos, int nthreads) {
    every_query(Shape{B, H, T, npos}, nthreads, [&](const Shape &sh, int b, int i, Workspace &ws) {
        attention_backward_query(sh, G ? G : S, table, slopes, att, gatt, gS, G ? gG : nullptr, gtable, b, i, ws);
    });
    return 0;
}

// the fused attention from q, k, v (B, H, T, D) contiguous: y (B, H, T, D) and each row's
// log-sum-exp (B, H, T); scale multiplies q before the dot products
int cope_qkv_forward(const float *q, const float *k, const float *v, const float *table, const float *slopes,
                     float *y, float *lse, int B, int H, int T, int D, int npos, float scale, int nthreads) {
    const QKV sh{B, H, T, D, npos, (T + BLK - 1) / BLK * BLK, scale};
    synthlab::parallel_units(B, synthlab::clamp_threads(nthreads, B), [&](int, long b0, long b1) {
        QKVWorkspace ws(sh, false);
        for (long b = b0; b < b1; ++b) qkv_forward_batch(sh, q, k, v, table, slopes, y, lse, (int)b, ws);
    });
    return 0;
}

int cope_qkv_backward(const float *q, const float *k, const float *v, const float *table, const float *slopes,
                      const float *lse, const float *gy, float *gq, float *gk, float *gv, float *gtable, int B, int H,
                      int T, int D, int npos, float scale, int nthreads) {
    const QKV sh{B, H, T, D, npos, (T + BLK - 1) / BLK * BLK, scale};
    synthlab::parallel_units(B, synthlab::clamp_threads(nthreads, B), [&](int, long b0, long b1) {
        QKVWorkspace ws(sh, true);
        for (long b = b0; b < b1; ++b)
            qkv_backward_batch(sh, q, k, v, table, slopes, lse, gy, gq, gk, gv, gtable, (int)b, ws);
    });
    return 0;
}

}  // extern "C"
