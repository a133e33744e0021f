/* agentrl's decoding kernels: what one cached decoding step of a Llama model does besides its weight products.

   policies/native.py compiles this file once with the machine's C compiler (-O3 -march=native -fopenmp) and loads it
   with ctypes; policies/llama_sampler.py calls it for the lean path's decoding steps (one new token a row), in
   bfloat16. In torch each of these steps is several operations, each a pass over memory and a dispatch; here each is
   one pass. The loops run on OpenMP's threads: the library links the OpenMP runtime torch has loaded, so they share
   its threads and its thread count (torch.set_num_threads).

   bf16 is bfloat16 stored as uint16_t; float is float32. The key/value cache is the lean path's: per layer
   (B, kv_heads, capacity, head_dim), row b's tokens in slots 0 .. len[b] - 1. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define AGENTRL_AVX512_BF16 1
#endif

typedef uint16_t bf16;

static inline float bf2f(bf16 h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

static inline bf16 f2bf(float f) {  /* round to nearest, ties to even: as torch rounds to bfloat16 */
    union { uint32_t u; float f; } v;
    v.f = f;
    return (bf16)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

/* 1 where the products below use AVX512-BF16 instructions, 0 where they run as portable C. */
int agentrl_avx512_bf16(void) {
#ifdef AGENTRL_AVX512_BF16
    return 1;
#else
    return 0;
#endif
}

/* x[r] += delta[r] (unless delta is NULL), then out[r] = bf16(x[r] / sqrt(mean(x[r]^2) + eps) * w): the residual
   stream (rows, d) in float32, a product's output (rows, d) added to it, and RMSNorm's output for the next product. */
void agentrl_add_rmsnorm(float *x, const bf16 *delta, const float *w, bf16 *out, int64_t rows, int64_t d, float eps) {
    #pragma omp parallel for schedule(static) if (rows > 8)
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * d, ss = 0.f;
        if (delta) {
            const bf16 *dr = delta + r * d;
            #pragma omp simd
            for (int64_t i = 0; i < d; i++) xr[i] += bf2f(dr[i]);
        }
        #pragma omp simd reduction(+:ss)
        for (int64_t i = 0; i < d; i++) ss += xr[i] * xr[i];
        const float inv = 1.f / sqrtf(ss / (float)d + eps);
        bf16 *o = out + r * d;
        #pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] = f2bf(xr[i] * inv * w[i]);
    }
}

/* out[r] = bf16(silu(gu[r, :n]) * gu[r, n:]): SwiGLU on the gate and up products side by side, gu (rows, 2 n). */
void agentrl_silu_mul(const bf16 *gu, bf16 *out, int64_t rows, int64_t n) {
    #pragma omp parallel for schedule(static) if (rows > 8)
    for (int64_t r = 0; r < rows; r++) {
        const bf16 *gate = gu + r * 2 * n, *up = gate + n;
        bf16 *o = out + r * n;
        #pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            const float a = bf2f(gate[i]);
            o[i] = f2bf(a / (1.f + expf(-a)) * bf2f(up[i]));
        }
    }
}

/* dst = bf16(rotary(x) * f): transformers' Llama rotary positions, each head's two halves rotated together:
   (x[d] cos[d] - x[d + half] sin[d], x[d + half] cos[d] + x[d] sin[d]) for d < half */
static inline void rotate(const bf16 *x, const float *cos, const float *sin, float f, bf16 *dst, int64_t hd) {
    const int64_t half = hd / 2;
    for (int64_t d = 0; d < half; d++) {
        const float lo = bf2f(x[d]), hi = bf2f(x[d + half]);
        dst[d] = f2bf((lo * cos[d] - hi * sin[d]) * f);
        dst[d + half] = f2bf((hi * cos[d] + lo * sin[d]) * f);
    }
}

/* Rotary positions on the query and key heads of a chunk: qkv (rows, nh + 2 kvh, hd), cos, sin (rows, hd / 2) at
   each token's position -> q (rows, nh, hd), its heads times `scale`, and k (rows, kvh, hd). */
void agentrl_rope(const bf16 *qkv, const float *cos, const float *sin, bf16 *q, bf16 *k, int64_t rows, int64_t nh,
                  int64_t kvh, int64_t hd, float scale) {
    #pragma omp parallel for schedule(static) if (rows > 8)
    for (int64_t r = 0; r < rows; r++) {
        const bf16 *x = qkv + r * (nh + 2 * kvh) * hd;
        const float *c = cos + r * (hd / 2), *s = sin + r * (hd / 2);
        for (int64_t j = 0; j < nh; j++) rotate(x + j * hd, c, s, scale, q + (r * nh + j) * hd, hd);
        for (int64_t j = 0; j < kvh; j++) rotate(x + (nh + j) * hd, c, s, 1.f, k + (r * kvh + j) * hd, hd);
    }
}

/* dot(q, k) over hd values, q and k in bfloat16, the sum in float32 */
static inline float dot(const bf16 *q, const bf16 *k, int64_t hd) {
#ifdef AGENTRL_AVX512_BF16
    if (hd % 32 == 0) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t d = 0; d < hd; d += 32)
            acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(k + d), (__m512bh)_mm512_loadu_si512(q + d));
        return _mm512_reduce_add_ps(acc);
    }
#endif
    float acc = 0.f;
    for (int64_t d = 0; d < hd; d++) acc += bf2f(q[d]) * bf2f(k[d]);
    return acc;
}

/* softmax over slots 0 .. n-1 of each of g score rows (stride S), in place, each probability rounded to bfloat16 */
static void softmax(float *p, int64_t n, int64_t g, int64_t S) {
    for (int64_t j = 0; j < g; j++) {
        float *r = p + j * S, mx = -FLT_MAX, total = 0.f;
        for (int64_t t = 0; t < n; t++) mx = r[t] > mx ? r[t] : mx;
        #pragma omp simd reduction(+:total)
        for (int64_t t = 0; t < n; t++) {
            r[t] = expf(r[t] - mx);
            total += r[t];
        }
        const float inv = 1.f / total;
        #pragma omp simd
        for (int64_t t = 0; t < n; t++) r[t] = bf2f(f2bf(r[t] * inv));
    }
}

#ifdef AGENTRL_AVX512_BF16
#define AHEAD 512  /* elements fetched ahead of the row being read: 8 rows of 64 */

/* p[j S + t] = q_j . K[t] for t < n, j < g <= 4, heads of 64 dimensions */
static void scores64(const bf16 *q, const bf16 *K, int64_t n, int64_t g, float *p, int64_t S) {
    __m512bh qa[4], qb[4];
    for (int64_t j = 0; j < g; j++) {
        qa[j] = (__m512bh)_mm512_loadu_si512(q + j * 64);
        qb[j] = (__m512bh)_mm512_loadu_si512(q + j * 64 + 32);
    }
    for (int64_t t = 0; t < n; t++) {
        const bf16 *k = K + t * 64;
        _mm_prefetch((const char *)(k + AHEAD), _MM_HINT_T0);
        const __m512bh ka = (__m512bh)_mm512_loadu_si512(k), kb = (__m512bh)_mm512_loadu_si512(k + 32);
        for (int64_t j = 0; j < g; j++)
            p[j * S + t] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), ka, qa[j]), kb, qb[j]));
    }
}

/* acc[j 64 + d] = sum over t < n of p[j S + t] V[t][d], j < g <= 4, heads of 64 dimensions */
static void values64(const float *p, const bf16 *V, int64_t n, int64_t g, int64_t S, float *acc) {
    __m512 a[4][4];
    for (int64_t j = 0; j < 4; j++)
        for (int64_t c = 0; c < 4; c++) a[j][c] = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; t++) {
        const bf16 *v = V + t * 64;
        _mm_prefetch((const char *)(v + AHEAD), _MM_HINT_T0);
        __m512 x[4];
        for (int64_t c = 0; c < 4; c++)  /* bfloat16 -> float32: the 16 bits become the high half */
            x[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(v + 16 * c))), 16));
        for (int64_t j = 0; j < g; j++) {
            const __m512 w = _mm512_set1_ps(p[j * S + t]);
            for (int64_t c = 0; c < 4; c++) a[j][c] = _mm512_fmadd_ps(w, x[c], a[j][c]);
        }
    }
    for (int64_t j = 0; j < g; j++)
        for (int64_t c = 0; c < 4; c++) _mm512_storeu_ps(acc + j * 64 + 16 * c, a[j][c]);
}
#endif

/* One decoding step's attention in one layer, for each row b with n_new[b] == 1 (rows with 0 are left alone):
   qkv (B, nh + 2 kvh, hd) is the row's new query, key and value heads, from one product; cos, sin (B, hd / 2) its
   rotary angles at its position len[b]. Rotary positions go on the queries (times `scale`, attention's
   1 / sqrt(hd)) and on the key, as transformers' Llama puts them (each head's two halves rotated together); the key
   and the value are written into slot len[b] of K and V (B, kvh, S, hd); then each query head h g + j attends over
   slots 0 .. len[b] of key/value head h (softmax in float32, probabilities and output rounded to bfloat16, as
   transformers' eager attention rounds them under bf16 autocast) -> out (B, nh * hd). */
void agentrl_decode_attention(const bf16 *qkv, const float *cos, const float *sin, bf16 *K, bf16 *V,
                              const int64_t *len, const int64_t *n_new, bf16 *out, int64_t B, int64_t nh,
                              int64_t kvh, int64_t hd, int64_t S, float scale) {
    const int64_t g = nh / kvh, half = hd / 2;
    #pragma omp parallel
    {
        bf16 *q = malloc(sizeof(bf16) * g * hd);    /* the rotated, scaled query heads of one key/value head */
        float *p = malloc(sizeof(float) * g * S);   /* their scores, then probabilities, over the slots */
        float *acc = malloc(sizeof(float) * g * hd);
        float *row_f = malloc(sizeof(float) * hd);  /* one value row in float32 (the portable path) */
        #pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * kvh; bh++) {
            const int64_t b = bh / kvh, h = bh % kvh;
            if (!n_new[b]) continue;
            const int64_t at = len[b], n = at + 1;  /* the new slot, and the slots it attends over */
            const bf16 *row = qkv + b * (nh + 2 * kvh) * hd;
            const float *c = cos + b * half, *s = sin + b * half;
            bf16 *Kh = K + bh * S * hd, *Vh = V + bh * S * hd;
            for (int64_t j = 0; j < g; j++) rotate(row + (h * g + j) * hd, c, s, scale, q + j * hd, hd);
            rotate(row + (nh + h) * hd, c, s, 1.f, Kh + at * hd, hd);
            memcpy(Vh + at * hd, row + (nh + kvh + h) * hd, sizeof(bf16) * hd);
            /* scores, then softmax, then values; the keys and values stream from memory, so rows ahead are fetched
               while these multiply */
#ifdef AGENTRL_AVX512_BF16
            if (hd == 64 && g <= 4) {
                scores64(q, Kh, n, g, p, S);
                softmax(p, n, g, S);
                values64(p, Vh, n, g, S, acc);
            } else
#endif
            {
                for (int64_t t = 0; t < n; t++)
                    for (int64_t j = 0; j < g; j++) p[j * S + t] = dot(q + j * hd, Kh + t * hd, hd);
                softmax(p, n, g, S);
                memset(acc, 0, sizeof(float) * g * hd);
                for (int64_t t = 0; t < n; t++) {
                    const bf16 *v = Vh + t * hd;
                    for (int64_t d = 0; d < hd; d++) row_f[d] = bf2f(v[d]);
                    for (int64_t j = 0; j < g; j++)
                        for (int64_t d = 0; d < hd; d++) acc[j * hd + d] += p[j * S + t] * row_f[d];
                }
            }
            bf16 *o = out + b * nh * hd + h * g * hd;
            for (int64_t i = 0; i < g * hd; i++) o[i] = f2bf(acc[i]);
        }
        free(q);
        free(p);
        free(acc);
        free(row_f);
    }
}
