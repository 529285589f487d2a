//! [`AutoAugment`]: torchvision's `TrivialAugmentWide` and `RandAugment`
//! policies, drawing [`Op`]s from their augmentation spaces.
//!
//! Both draw from the same 14 ops (`Identity`, `ShearX`, `ShearY`,
//! `TranslateX`, `TranslateY`, `Rotate`, `Brightness`, `Color`,
//! `Contrast`, `Sharpness`, `Posterize`, `Solarize`, `AutoContrast`,
//! `Equalize`), each with probability 1/14, with torchvision's magnitude
//! tables (`torch.linspace` in `f32`, replicated to the bit) and a random
//! sign (probability 1/2) for the signed ops. `TrivialAugmentWide` applies
//! one op at a uniformly drawn magnitude bin; `RandAugment` applies
//! `num_ops` ops at the fixed bin `magnitude`.

use super::op::Op;
use crate::rng::Rng;
use crate::PipelineError;

/// The number of ops in the augmentation space.
pub const NUM_AUTO_OPS: usize = 14;

/// An automatic augmentation policy (torchvision's, `NEAREST`, fill 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoAugment {
    /// `TrivialAugmentWide(num_magnitude_bins)`: one op per image.
    TrivialAugmentWide {
        /// Magnitude bins (torchvision's default 31).
        num_magnitude_bins: u32,
    },
    /// `RandAugment(num_ops, magnitude, num_magnitude_bins)`.
    RandAugment {
        /// Ops applied one after the other (default 2).
        num_ops: u32,
        /// The magnitude bin, in `0..num_magnitude_bins` (default 9).
        magnitude: u32,
        /// Magnitude bins (default 31).
        num_magnitude_bins: u32,
    },
}

/// Largest number of ops per image accepted for `RandAugment`.
const MAX_OPS: u32 = 64;

impl AutoAugment {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] naming the bad value.
    pub fn validate(&self) -> Result<(), PipelineError> {
        let bins = match *self {
            AutoAugment::TrivialAugmentWide { num_magnitude_bins } => num_magnitude_bins,
            AutoAugment::RandAugment {
                num_ops,
                magnitude,
                num_magnitude_bins,
            } => {
                if num_ops > MAX_OPS {
                    return Err(PipelineError::InvalidConfig(format!(
                        "RandAugment num_ops {num_ops} must be at most {MAX_OPS} (e.g. 2)"
                    )));
                }
                if magnitude >= num_magnitude_bins {
                    return Err(PipelineError::InvalidConfig(format!(
                        "RandAugment magnitude {magnitude} must be below num_magnitude_bins \
                         {num_magnitude_bins} (e.g. magnitude=9 of 31 bins)"
                    )));
                }
                num_magnitude_bins
            }
        };
        if !(2..=1024).contains(&bins) {
            return Err(PipelineError::InvalidConfig(format!(
                "num_magnitude_bins {bins} must be in 2..=1024 (e.g. 31)"
            )));
        }
        Ok(())
    }

    /// Draws the ops for one image of `width` x `height` from `rng`.
    pub(crate) fn draw(&self, rng: &mut Rng, width: u32, height: u32, ops: &mut Vec<Op>) {
        let (count, bins, wide) = match *self {
            AutoAugment::TrivialAugmentWide { num_magnitude_bins } => (1, num_magnitude_bins, true),
            AutoAugment::RandAugment {
                num_ops,
                num_magnitude_bins,
                ..
            } => (num_ops, num_magnitude_bins, false),
        };
        for _ in 0..count {
            let kind = rng.below(NUM_AUTO_OPS as u64) as usize;
            let bin = match *self {
                AutoAugment::TrivialAugmentWide { .. } => rng.below(u64::from(bins)) as u32,
                AutoAugment::RandAugment { magnitude, .. } => magnitude,
            };
            let (mut value, signed) = magnitude(kind, wide, bins, bin, width, height);
            if signed && rng.below(2) == 1 {
                value = -value;
            }
            ops.push(make(kind, value));
        }
    }
}

/// The op at position `kind` of the augmentation space with `value`.
fn make(kind: usize, value: f64) -> Op {
    match kind {
        1 => Op::ShearX(value),
        2 => Op::ShearY(value),
        3 => Op::TranslateX(value),
        4 => Op::TranslateY(value),
        5 => Op::Rotate(value),
        6 => Op::Brightness(value),
        7 => Op::Color(value),
        8 => Op::Contrast(value),
        9 => Op::Sharpness(value),
        10 => Op::Posterize(value),
        11 => Op::Solarize(value),
        12 => Op::AutoContrast,
        13 => Op::Equalize,
        _ => Op::Identity,
    }
}

/// `torch.linspace(start, end, steps)[i]` in `f32`: `start + step * i` in
/// the first half, `end - step * (steps - 1 - i)` in the second, each a
/// fused multiply-add (one rounding), as torch's CPU kernel computes the
/// short tables here (checked against torch: `linspace(0, 32, 31)[15]` is
/// `15.999999`, whose `int()` is 15).
pub(crate) fn linspace(start: f64, end: f64, steps: u32, i: u32) -> f32 {
    let (start, end) = (start as f32, end as f32);
    if steps <= 1 {
        return start;
    }
    let step = (end - start) / (steps - 1) as f32;
    if i < steps / 2 {
        step.mul_add(i as f32, start)
    } else {
        (-step).mul_add((steps - 1 - i) as f32, end)
    }
}

/// Magnitude of op `kind` at `bin` of `bins`, and whether it is signed:
/// `_augmentation_space` of `TrivialAugmentWide` (`wide`) or `RandAugment`.
fn magnitude(kind: usize, wide: bool, bins: u32, bin: u32, width: u32, height: u32) -> (f64, bool) {
    let lin = |end: f64| (f64::from(linspace(0.0, end, bins, bin)), true);
    let (shear, factor) = if wide { (0.99, 0.99) } else { (0.3, 0.9) };
    let translate = |side: u32| {
        if wide {
            32.0
        } else {
            150.0 / 331.0 * f64::from(side)
        }
    };
    match kind {
        1 | 2 => lin(shear),
        3 => lin(translate(width)),
        4 => lin(translate(height)),
        5 => lin(if wide { 135.0 } else { 30.0 }),
        6..=9 => lin(factor),
        10 => {
            // 8 - (arange(bins) / ((bins - 1) / k)).round().int(), in f32.
            let k = if wide { 6.0 } else { 4.0 };
            let div = (f64::from(bins - 1) / k) as f32;
            (8.0 - f64::from((bin as f32 / div).round_ties_even()), false)
        }
        11 => (f64::from(linspace(255.0, 0.0, bins, bin)), false),
        _ => (0.0, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_is_torchs() {
        assert!((linspace(0.0, 0.3, 31, 9) - 0.09).abs() < 1e-7);
        assert_eq!(linspace(255.0, 0.0, 31, 0), 255.0);
        assert_eq!(linspace(255.0, 0.0, 31, 30), 0.0);
        assert_eq!(linspace(0.0, 32.0, 31, 30), 32.0);
        // torch.linspace(0, 32, 31)[15:19] on the CPU.
        let want = [
            15.999_999_046_325_684,
            17.066_665_649_414_062,
            18.133_333_206_176_758,
        ];
        for (k, w) in want.into_iter().enumerate() {
            assert_eq!(linspace(0.0, 32.0, 31, 15 + k as u32), w as f32);
        }
    }

    #[test]
    fn posterize_and_solarize_tables() {
        // RandAugment: bins 0..=30 -> 8 - round(i / 7.5): bin 9 -> 7.
        assert_eq!(magnitude(10, false, 31, 9, 8, 8), (7.0, false));
        assert_eq!(magnitude(10, false, 31, 30, 8, 8), (4.0, false));
        // TrivialAugmentWide: 8 - round(i / 5): bin 30 -> 2.
        assert_eq!(magnitude(10, true, 31, 30, 8, 8), (2.0, false));
        assert_eq!(magnitude(10, true, 31, 0, 8, 8), (8.0, false));
        assert_eq!(magnitude(11, true, 31, 0, 8, 8), (255.0, false));
        // RandAugment's translation scales with the side.
        let (t, signed) = magnitude(3, false, 31, 30, 331, 8);
        assert!(signed && (t - 150.0).abs() < 1e-4, "{t}");
    }

    #[test]
    fn ops_are_drawn_uniformly_with_both_signs() {
        let ta = AutoAugment::TrivialAugmentWide {
            num_magnitude_bins: 31,
        };
        let mut rng = Rng::derive(&[5]);
        let mut counts = [0usize; NUM_AUTO_OPS];
        let (mut neg, mut pos) = (0, 0);
        let mut ops = Vec::new();
        for _ in 0..14_000 {
            ops.clear();
            ta.draw(&mut rng, 32, 32, &mut ops);
            assert_eq!(ops.len(), 1);
            counts[ops[0].index()] += 1;
            if let Op::Rotate(v) = ops[0] {
                if v < 0.0 {
                    neg += 1;
                } else if v > 0.0 {
                    pos += 1;
                }
            }
        }
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
        assert!(neg > 400 && pos > 400, "{neg} {pos}");
        let ra = AutoAugment::RandAugment {
            num_ops: 3,
            magnitude: 9,
            num_magnitude_bins: 31,
        };
        ops.clear();
        ra.draw(&mut rng, 32, 32, &mut ops);
        assert_eq!(ops.len(), 3);
    }

    #[test]
    fn validation_names_the_fix() {
        let bad = AutoAugment::RandAugment {
            num_ops: 2,
            magnitude: 31,
            num_magnitude_bins: 31,
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("magnitude"));
        let bad = AutoAugment::TrivialAugmentWide {
            num_magnitude_bins: 1,
        };
        assert!(bad.validate().is_err());
    }
}
