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

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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

// p[h][j] = sum_{t=j..L-1} g[h][t], for the H rows of one query.
void suffix_sums(const float *const *g, float *const *p, int H, int L) {
    int h = 0;
    for (; h + 4 <= H; h += 4) {
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int j = L - 1; j >= 0; --j) {
            a0 += g[h][j]; p[h][j] = a0;
            a1 += g[h + 1][j]; p[h + 1][j] = a1;
            a2 += g[h + 2][j]; p[h + 2][j] = a2;
            a3 += g[h + 3][j]; p[h + 3][j] = a3;
        }
    }
    for (; h < H; ++h) {
        float a = 0;
        for (int j = L - 1; j >= 0; --j) { a += g[h][j]; p[h][j] = a; }
    }
}

struct Workspace {
    std::vector<float> p, dp, gtab;  // positions (H x T), their gradient (H x T), table gradient (npos)
    std::vector<const float *> g;
    std::vector<float *> prow, dprow;
    explicit Workspace(const Shape &sh)
        : p((size_t)sh.H * sh.T), dp((size_t)sh.H * sh.T), gtab(sh.npos), g(sh.H), prow(sh.H), dprow(sh.H) {
        for (int h = 0; h < sh.H; ++h) { prow[h] = p.data() + (size_t)h * sh.T; dprow[h] = dp.data() + (size_t)h * sh.T; }
    }
};

void forward_query(const Shape &sh, const float *gates, const float *table, const float *slopes, float *out,
                   int b, int i, Workspace &ws) {
    const int L = i + 1, T = sh.T, top = sh.npos - 1;
    for (int h = 0; h < sh.H; ++h) ws.g[h] = gates + sh.row(b, h, i);
    suffix_sums(ws.g.data(), ws.prow.data(), sh.H, L);
    for (int h = 0; h < sh.H; ++h) {
        const float *p = ws.prow[h];
        float *o = out + sh.row(b, h, i);
        if (table) {
            const float *e = table + sh.table_row(b, h, i);
            for (int j = 0; j < L; ++j) {
                const float pc = std::min(p[j], (float)top);
                const int lo = (int)pc;  // pc >= 0: truncation is the floor
                const float w = pc - (float)lo, low = e[lo], high = e[std::min(lo + 1, top)];
                o[j] = low + w * (high - low);
            }
        } else {
            const float m = -slopes[h];
            for (int j = 0; j < L; ++j) o[j] = m * std::min(p[j], (float)top);
        }
        std::memset(o + L, 0, sizeof(float) * (T - L));
    }
}

void backward_query(const Shape &sh, const float *gates, const float *table, const float *slopes, const float *gout,
                    float *ggates, float *gtable, int b, int i, Workspace &ws) {
    const int L = i + 1, T = sh.T, top = sh.npos - 1;
    for (int h = 0; h < sh.H; ++h) ws.g[h] = gates + sh.row(b, h, i);
    suffix_sums(ws.g.data(), ws.prow.data(), sh.H, L);  // recomputed, not stored by the forward
    for (int h = 0; h < sh.H; ++h) {
        const float *p = ws.prow[h], *d = gout + sh.row(b, h, i);
        float *dp = ws.dprow[h];
        if (table) {
            const float *e = table + sh.table_row(b, h, i);
            float *gt = ws.gtab.data();
            std::fill(gt, gt + sh.npos, 0.0f);
            for (int j = 0; j < L; ++j) {
                const float pc = std::min(p[j], (float)top);
                const int lo = (int)pc, hi = std::min(lo + 1, top);
                const float w = pc - (float)lo, low = e[lo], high = e[hi];
                gt[lo] += d[j] - d[j] * w;  // out = low + w (high - low)
                gt[hi] += d[j] * w;
                dp[j] = d[j] * (high - low);
            }
            std::memcpy(gtable + sh.table_row(b, h, i), gt, sizeof(float) * sh.npos);
        } else {
            const float m = -slopes[h];
            for (int j = 0; j < L; ++j) dp[j] = p[j] <= (float)top ? m * d[j] : 0.0f;  // the clamp's gradient
        }
    }
    // d g_t = sum_{j <= t} d p_j: prefix scans, four heads interleaved
    int h = 0;
    for (; h + 4 <= sh.H; h += 4) {
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        float *o0 = ggates + sh.row(b, h, i), *o1 = ggates + sh.row(b, h + 1, i);
        float *o2 = ggates + sh.row(b, h + 2, i), *o3 = ggates + sh.row(b, h + 3, i);
        const float *d0 = ws.dprow[h], *d1 = ws.dprow[h + 1], *d2 = ws.dprow[h + 2], *d3 = ws.dprow[h + 3];
        for (int j = 0; j < L; ++j) {
            a0 += d0[j]; o0[j] = a0;
            a1 += d1[j]; o1[j] = a1;
            a2 += d2[j]; o2[j] = a2;
            a3 += d3[j]; o3[j] = a3;
        }
    }
    for (; h < sh.H; ++h) {
        float a = 0, *o = ggates + sh.row(b, h, i);
        const float *dd = ws.dprow[h];
        for (int j = 0; j < L; ++j) { a += dd[j]; o[j] = a; }
    }
    for (int hh = 0; hh < sh.H; ++hh) std::memset(ggates + sh.row(b, hh, i) + L, 0, sizeof(float) * (T - L));
}

}  // namespace

extern "C" {

int cope_abi_version() { return 1; }

int cope_forward(const float *gates, const float *table, const float *slopes, float *out, int B, int H, int T,
                 int npos, int nthreads) {
    const Shape sh{B, H, T, npos};
    const long total = (long)B * ((T + 1) / 2);
    synthlab::parallel_units(total, synthlab::clamp_threads(nthreads, total), [&](int, long u0, long u1) {
        Workspace ws(sh);
        for (long u = u0; u < u1; ++u)
            each_row(sh, u, [&](int b, int i) { forward_query(sh, gates, table, slopes, out, b, i, ws); });
    });
    return 0;
}

int cope_backward(const float *gates, const float *table, const float *slopes, const float *gout, float *ggates,
                  float *gtable, int B, int H, int T, int npos, int nthreads) {
    const Shape sh{B, H, T, npos};
    const long total = (long)B * ((T + 1) / 2);
    synthlab::parallel_units(total, synthlab::clamp_threads(nthreads, total), [&](int, long u0, long u1) {
        Workspace ws(sh);
        for (long u = u0; u < u1; ++u)
            each_row(sh, u, [&](int b, int i) {
                backward_query(sh, gates, table, slopes, gout, ggates, gtable, b, i, ws);
            });
    });
    return 0;
}

}  // extern "C"
