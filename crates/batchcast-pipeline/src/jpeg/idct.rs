//! libjpeg's "islow" inverse DCT (`jidctint.c`, the default `JDCT_ISLOW`
//! that PIL decodes with), bit for bit: 13-bit fixed-point constants, two
//! extra bits of precision between the passes, rounding descales, and the
//! range limit with its 10-bit wraparound.
//!
//! Each pass works on eight lanes at once (the columns in pass 1, the rows
//! in pass 2), written so the compiler vectorises it. Arithmetic wraps on
//! overflow, which only corrupt data can cause (libjpeg's SIMD code wraps
//! too).

type Lanes = [i32; 8];

const CONST_BITS: u32 = 13;
const PASS1_BITS: u32 = 2;

// FIX(x) = round(x * 2^13).
const FIX_0_298631336: i32 = 2446;
const FIX_0_390180644: i32 = 3196;
const FIX_0_541196100: i32 = 4433;
const FIX_0_765366865: i32 = 6270;
const FIX_0_899976223: i32 = 7373;
const FIX_1_175875602: i32 = 9633;
const FIX_1_501321110: i32 = 12299;
const FIX_1_847759065: i32 = 15137;
const FIX_1_961570560: i32 = 16069;
const FIX_2_053119869: i32 = 16819;
const FIX_2_562915447: i32 = 20995;
const FIX_3_072711026: i32 = 25172;

/// One 1-D pass over eight lanes: `x[k][i]` is frequency `k` of lane `i`;
/// writes sample `k` of lane `i` to `out[k][i]`, descaled by `shift` bits
/// with rounding. (A loop over the lanes with scalar code in the body: the
/// form the loop vectoriser turns into one SIMD operation per line.)
#[inline(always)]
fn pass(x: &[Lanes; 8], out: &mut [Lanes; 8], shift: u32) {
    let round = 1i32 << (shift - 1);
    for i in 0..8 {
        let w = |k: usize| x[k][i];
        // Even part.
        let z1 = w(2).wrapping_add(w(6)).wrapping_mul(FIX_0_541196100);
        let tmp2 = z1.wrapping_add(w(6).wrapping_mul(-FIX_1_847759065));
        let tmp3 = z1.wrapping_add(w(2).wrapping_mul(FIX_0_765366865));
        let tmp0 = w(0).wrapping_add(w(4)).wrapping_shl(CONST_BITS);
        let tmp1 = w(0).wrapping_sub(w(4)).wrapping_shl(CONST_BITS);
        let (tmp10, tmp13) = (tmp0.wrapping_add(tmp3), tmp0.wrapping_sub(tmp3));
        let (tmp11, tmp12) = (tmp1.wrapping_add(tmp2), tmp1.wrapping_sub(tmp2));
        // Odd part.
        let (t0, t1, t2, t3) = (w(7), w(5), w(3), w(1));
        let (z1, z2) = (t0.wrapping_add(t3), t1.wrapping_add(t2));
        let (z3, z4) = (t0.wrapping_add(t2), t1.wrapping_add(t3));
        let z5 = z3.wrapping_add(z4).wrapping_mul(FIX_1_175875602);
        let t0 = t0.wrapping_mul(FIX_0_298631336);
        let t1 = t1.wrapping_mul(FIX_2_053119869);
        let t2 = t2.wrapping_mul(FIX_3_072711026);
        let t3 = t3.wrapping_mul(FIX_1_501321110);
        let z1 = z1.wrapping_mul(-FIX_0_899976223);
        let z2 = z2.wrapping_mul(-FIX_2_562915447);
        let z3 = z3.wrapping_mul(-FIX_1_961570560).wrapping_add(z5);
        let z4 = z4.wrapping_mul(-FIX_0_390180644).wrapping_add(z5);
        let t0 = t0.wrapping_add(z1).wrapping_add(z3);
        let t1 = t1.wrapping_add(z2).wrapping_add(z4);
        let t2 = t2.wrapping_add(z2).wrapping_add(z3);
        let t3 = t3.wrapping_add(z1).wrapping_add(z4);
        let d = |v: i32| v.wrapping_add(round) >> shift;
        out[0][i] = d(tmp10.wrapping_add(t3));
        out[7][i] = d(tmp10.wrapping_sub(t3));
        out[1][i] = d(tmp11.wrapping_add(t2));
        out[6][i] = d(tmp11.wrapping_sub(t2));
        out[2][i] = d(tmp12.wrapping_add(t1));
        out[5][i] = d(tmp12.wrapping_sub(t1));
        out[3][i] = d(tmp13.wrapping_add(t0));
        out[4][i] = d(tmp13.wrapping_sub(t0));
    }
}

#[inline(always)]
fn transpose(m: &[Lanes; 8]) -> [Lanes; 8] {
    std::array::from_fn(|r| std::array::from_fn(|c| m[c][r]))
}

/// libjpeg's post-IDCT range limit: `x` is centred on 0; the table it
/// indexes with `x & 1023` clamps to 0..=255 and wraps beyond +-512.
#[inline(always)]
fn range_limit(x: i32) -> u8 {
    let wrapped = ((x & 1023) ^ 512) - 512;
    (wrapped + 128).clamp(0, 255) as u8
}

/// Inverse DCT of one dequantised block (`coef` in natural order, rows of
/// 8) into 8 rows of 8 samples at `out[0..]`, `stride` bytes apart.
#[inline(always)]
pub(crate) fn idct_block(coef: &[Lanes; 8], out: &mut [u8], stride: usize) {
    // Pass 1 down the columns (lanes = columns), pass 2 along the rows
    // (lanes = rows, after a transpose), as libjpeg orders them.
    let mut ws = [[0i32; 8]; 8];
    pass(coef, &mut ws, CONST_BITS - PASS1_BITS);
    let mut px = [[0i32; 8]; 8];
    pass(&transpose(&ws), &mut px, CONST_BITS + PASS1_BITS + 3);
    let mut bytes = [[0u8; 8]; 8];
    for (b, p) in bytes.iter_mut().zip(&px) {
        for i in 0..8 {
            b[i] = range_limit(p[i]);
        }
    }
    // bytes[x][y]: sample (y, x).
    for (y, line) in out.chunks_mut(stride).take(8).enumerate() {
        let line = &mut line[..8];
        for (x, o) in line.iter_mut().enumerate() {
            *o = bytes[x][y];
        }
    }
}

/// A block whose AC coefficients are all zero: every sample is the DC's.
#[inline(always)]
pub(crate) fn idct_dc_only(dc: i32, out: &mut [u8], stride: usize) {
    // Both passes on DC alone reduce to DESCALE(dc, 3).
    let v = range_limit(dc.wrapping_add(4) >> 3);
    for line in out.chunks_mut(stride).take(8) {
        line[..8].fill(v);
    }
}

/// The matrices of the reduced inverse DCTs, `M[n][x][u] = C(u) / 2 *
/// cos((2x + 1) u pi / 2n)` for an `n`-point output (`n` in 1..=7; rows
/// `n = 0` and `8` unused), `C(0) = 1/sqrt 2`, else 1, computed in `f64`
/// and rounded to `f32`; with each one's transpose (`[u][x]`).
struct Scaled {
    m: [[[f32; 8]; 8]; 8],
    mt: [[[f32; 8]; 8]; 8],
}

fn scaled_matrices() -> &'static Scaled {
    static M: std::sync::OnceLock<Scaled> = std::sync::OnceLock::new();
    M.get_or_init(|| {
        let entry = |n: usize, x: usize, u: usize| {
            if n == 0 || x >= n || u >= n {
                return 0.0;
            }
            let c = if u == 0 {
                std::f64::consts::FRAC_1_SQRT_2
            } else {
                1.0
            };
            let arg = (2 * x + 1) as f64 * u as f64 * std::f64::consts::PI / (2 * n) as f64;
            (c / 2.0 * arg.cos()) as f32
        };
        Scaled {
            m: std::array::from_fn(|n| {
                std::array::from_fn(|x| std::array::from_fn(|u| entry(n, x, u)))
            }),
            mt: std::array::from_fn(|n| {
                std::array::from_fn(|u| std::array::from_fn(|x| entry(n, x, u)))
            }),
        }
    })
}

/// Inverse DCT of one dequantised block (`coef` in natural order, rows of
/// 8) to `n` x `n` samples (`n` in 1..=7) at `out[0..]`, `stride` bytes
/// apart: the block's image at `n/8` of its size. The `n`-point inverse
/// DCT of the `n` x `n` lowest frequencies samples the same continuous
/// image as the 8-point one at the centres of the `n` x `n` grid (what
/// libjpeg's scaled IDCTs, `jpeg_idct_NxN`, compute; here in `f32`, so
/// the samples can differ from libjpeg's by a level).
#[inline(always)]
pub(crate) fn idct_scaled(coef: &[Lanes; 8], n: usize, out: &mut [u8], stride: usize) {
    let t = scaled_matrices();
    match n {
        1 => idct_n::<1>(coef, t, out, stride),
        2 => idct_n::<2>(coef, t, out, stride),
        3 => idct_n::<3>(coef, t, out, stride),
        4 => idct_n::<4>(coef, t, out, stride),
        5 => idct_n::<5>(coef, t, out, stride),
        6 => idct_n::<6>(coef, t, out, stride),
        _ => idct_n::<7>(coef, t, out, stride),
    }
}

/// [`idct_scaled`] for `N` known at compile time (the loops unroll into
/// eight-lane arithmetic).
#[inline(always)]
fn idct_n<const N: usize>(coef: &[Lanes; 8], t: &Scaled, out: &mut [u8], stride: usize) {
    let (m, mt) = (&t.m[N], &t.mt[N]);
    // Pass 1 down the columns (lanes = horizontal frequencies u):
    // col[y][u] = sum over v of M[y][v] F[v][u].
    let mut f = [[0f32; 8]; N];
    for v in 0..N {
        for u in 0..8 {
            f[v][u] = coef[v][u] as f32;
        }
    }
    let mut col = [[0f32; 8]; N];
    for y in 0..N {
        for v in 0..N {
            let w = m[y][v];
            for u in 0..8 {
                col[y][u] += w * f[v][u];
            }
        }
    }
    // Pass 2 along the rows (lanes = x): px[y][x] = sum over u of
    // col[y][u] M[x][u], with M's columns as lanes.
    for (y, line) in out.chunks_mut(stride).take(N).enumerate() {
        let mut px = [0f32; 8];
        for u in 0..N {
            let c = col[y][u];
            for x in 0..8 {
                px[x] += c * mt[u][x];
            }
        }
        for (o, p) in line[..N].iter_mut().zip(px) {
            // Level shift, round half up, clamp (`as` saturates at 0).
            *o = (p + 128.5).min(255.0) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(coef: &[i32; 64]) -> [Lanes; 8] {
        std::array::from_fn(|k| std::array::from_fn(|i| coef[k * 8 + i]))
    }

    /// Double-precision IDCT, the definition libjpeg approximates.
    fn reference(coef: &[i32; 64]) -> [f64; 64] {
        let c = |u: usize| if u == 0 { 1.0 / 2f64.sqrt() } else { 1.0 };
        std::array::from_fn(|i| {
            let (y, x) = (i / 8, i % 8);
            let mut s = 0.0;
            for v in 0..8 {
                for u in 0..8 {
                    let cos = |p: usize, f: usize| {
                        ((2 * p + 1) as f64 * f as f64 * std::f64::consts::PI / 16.0).cos()
                    };
                    s += c(u) * c(v) * f64::from(coef[v * 8 + u]) * cos(x, u) * cos(y, v);
                }
            }
            s / 4.0 + 128.0
        })
    }

    /// A block of coefficients like a photograph's: a large DC, smaller
    /// higher frequencies (an LCG from `seed`).
    fn random_block(seed: &mut u32) -> [i32; 64] {
        std::array::from_fn(|i| {
            *seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let span = if i == 0 {
                800
            } else {
                200 / (1 + i as i32 / 8)
            };
            (*seed >> 8) as i32 % span - span / 2
        })
    }

    #[test]
    fn matches_the_real_idct_within_rounding() {
        let mut seed = 12345u32;
        for round in 0..50 {
            let coef = random_block(&mut seed);
            let mut out = [0u8; 64];
            idct_block(&rows(&coef), &mut out, 8);
            for (o, r) in out.iter().zip(reference(&coef)) {
                let expect = r.round().clamp(0.0, 255.0);
                assert!(
                    (f64::from(*o) - expect).abs() <= 1.0,
                    "round {round}: {o} vs {r}"
                );
            }
        }
    }

    #[test]
    fn dc_only_shortcut_equals_the_full_transform() {
        for dc in [-1024, -1000, -3, 0, 4, 5, 100, 1016, 1023] {
            let mut coef = [0i32; 64];
            coef[0] = dc;
            let (mut full, mut fast) = ([0u8; 64], [0u8; 64]);
            idct_block(&rows(&coef), &mut full, 8);
            idct_dc_only(dc, &mut fast, 8);
            assert_eq!(full, fast, "dc {dc}");
        }
    }

    #[test]
    fn range_limit_clamps_and_wraps_like_libjpeg() {
        assert_eq!(range_limit(-128), 0);
        assert_eq!(range_limit(0), 128);
        assert_eq!(range_limit(127), 255);
        assert_eq!(range_limit(300), 255);
        assert_eq!(range_limit(-300), 0);
        assert_eq!(range_limit(1024), 128); // wraps
    }

    /// Double-precision reduced IDCT: the 8-point basis sampled at the
    /// centres of an `n`-point grid.
    fn reference_scaled(coef: &[i32; 64], n: usize) -> Vec<f64> {
        let c = |u: usize| if u == 0 { 1.0 / 2f64.sqrt() } else { 1.0 };
        let mut out = Vec::new();
        for y in 0..n {
            for x in 0..n {
                let mut s = 0.0;
                for v in 0..n {
                    for u in 0..n {
                        // Grid centre (x + 1/2) * 8/n is pixel position p = that - 1/2.
                        let cos = |p: usize, f: usize| {
                            let centre = (p as f64 + 0.5) * 8.0 / n as f64;
                            (2.0 * centre * f as f64 * std::f64::consts::PI / 16.0).cos()
                        };
                        s += c(u) * c(v) * f64::from(coef[v * 8 + u]) * cos(x, u) * cos(y, v);
                    }
                }
                out.push(s / 4.0 + 128.0);
            }
        }
        out
    }

    #[test]
    fn scaled_idct_samples_the_block_at_the_smaller_grid() {
        let mut seed = 777u32;
        for round in 0..40 {
            let coef = random_block(&mut seed);
            for n in 1..8 {
                let mut out = [0u8; 64];
                idct_scaled(&rows(&coef), n, &mut out, 8);
                let want = reference_scaled(&coef, n);
                for y in 0..n {
                    for x in 0..n {
                        let (o, r) = (out[y * 8 + x], want[y * n + x]);
                        let expect = r.round().clamp(0.0, 255.0);
                        assert!(
                            (f64::from(o) - expect).abs() <= 1.0,
                            "round {round} n {n}: {o} vs {r}"
                        );
                    }
                }
            }
        }
        // A flat block stays flat at every size, and the DC keeps its level.
        let mut coef = [0i32; 64];
        coef[0] = 80; // +10 levels
        for n in 1..8 {
            let mut out = [0u8; 64];
            idct_scaled(&rows(&coef), n, &mut out, 8);
            for y in 0..n {
                assert!(
                    out[y * 8..y * 8 + n].iter().all(|&v| v == 138),
                    "n {n}: {out:?}"
                );
            }
        }
    }
}
