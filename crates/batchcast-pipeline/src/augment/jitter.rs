//! [`ColorJitter`]: torchvision's `ColorJitter(brightness, contrast,
//! saturation, hue)`: per image, a random order of the four adjustments
//! (a permutation, as `torch.randperm(4)`) and a factor for each one that
//! is on, uniform in its range.

use super::op::Op;
use crate::rng::Rng;
use crate::PipelineError;

/// Factor ranges `(min, max)`; `None` leaves that adjustment out (as
/// torchvision does for `0`, or `(1, 1)`, or `(0, 0)` for the hue).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ColorJitter {
    /// `adjust_brightness` factor range, `0 <= min <= max`.
    pub brightness: Option<(f64, f64)>,
    /// `adjust_contrast` factor range, `0 <= min <= max`.
    pub contrast: Option<(f64, f64)>,
    /// `adjust_saturation` factor range, `0 <= min <= max`.
    pub saturation: Option<(f64, f64)>,
    /// `adjust_hue` factor range, `-0.5 <= min <= max <= 0.5`.
    pub hue: Option<(f64, f64)>,
}

impl ColorJitter {
    /// Checks the ranges.
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] naming the bad range and the bounds.
    pub fn validate(&self) -> Result<(), PipelineError> {
        let check = |name: &str, range: Option<(f64, f64)>, lo: f64, hi: f64| match range {
            Some((a, b)) if !(lo <= a && a <= b && b <= hi) => {
                Err(PipelineError::InvalidConfig(format!(
                    "ColorJitter {name} range ({a}, {b}) must satisfy {lo} <= min <= max <= {hi}"
                )))
            }
            _ => Ok(()),
        };
        check("brightness", self.brightness, 0.0, f64::MAX)?;
        check("contrast", self.contrast, 0.0, f64::MAX)?;
        check("saturation", self.saturation, 0.0, f64::MAX)?;
        check("hue", self.hue, -0.5, 0.5)
    }

    /// Draws one image's adjustments, in the order to apply them.
    pub(crate) fn draw(&self, rng: &mut Rng, ops: &mut Vec<Op>) {
        // Fisher-Yates: a uniform permutation of 0..4.
        let mut order = [0usize, 1, 2, 3];
        for i in (1..4).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        // The factors are drawn whatever the order, as torchvision does,
        // and rounded to f32 (`torch.empty(1).uniform_(min, max)`).
        let mut factor =
            |r: Option<(f64, f64)>| r.map(|(a, b)| f64::from(rng.uniform(a, b) as f32));
        let factors = [
            factor(self.brightness).map(Op::AdjustBrightness),
            factor(self.contrast).map(Op::AdjustContrast),
            factor(self.saturation).map(Op::AdjustSaturation),
            factor(self.hue).map(Op::AdjustHue),
        ];
        ops.extend(order.iter().filter_map(|&i| factors[i]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_occurs_and_factors_stay_in_range() {
        let j = ColorJitter {
            brightness: Some((0.6, 1.4)),
            contrast: Some((0.5, 1.5)),
            saturation: Some((0.0, 2.0)),
            hue: Some((-0.1, 0.1)),
        };
        j.validate().unwrap();
        let mut rng = Rng::derive(&[3]);
        let mut seen = std::collections::HashMap::new();
        let mut ops = Vec::new();
        for _ in 0..2400 {
            ops.clear();
            j.draw(&mut rng, &mut ops);
            assert_eq!(ops.len(), 4);
            let order: Vec<usize> = ops.iter().map(Op::index).collect();
            *seen.entry(order).or_insert(0) += 1;
            for op in &ops {
                let ok = match *op {
                    Op::AdjustBrightness(f) => (0.6..1.4).contains(&f),
                    Op::AdjustContrast(f) => (0.5..1.5).contains(&f),
                    Op::AdjustSaturation(f) => (0.0..2.0).contains(&f),
                    Op::AdjustHue(f) => (-0.1..0.1).contains(&f),
                    _ => false,
                };
                assert!(ok, "{op:?}");
            }
        }
        assert_eq!(seen.len(), 24, "all 4! orders");
        assert!(seen.values().all(|&n| (50..150).contains(&n)), "{seen:?}");
    }

    #[test]
    fn off_adjustments_are_left_out_and_bad_ranges_refused() {
        let j = ColorJitter {
            hue: Some((0.0, 0.2)),
            ..ColorJitter::default()
        };
        let mut ops = Vec::new();
        j.draw(&mut Rng::derive(&[1]), &mut ops);
        assert!(matches!(ops[..], [Op::AdjustHue(_)]));
        let bad = ColorJitter {
            hue: Some((0.0, 0.7)),
            ..ColorJitter::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("hue"));
        let bad = ColorJitter {
            brightness: Some((-0.1, 1.0)),
            ..ColorJitter::default()
        };
        assert!(bad.validate().is_err());
    }
}
