//! [`Op`]: one image op with its parameter, as torchvision names and
//! applies it: the auto-augment ops of `autoaugment._apply_op` (with its
//! magnitude) and the `adjust_*` functions behind `ColorJitter` (with
//! their factor).

use super::geometry::{self, Affine};
use super::{colour, hue, tone};
use crate::PipelineError;

/// One op and its parameter. The auto-augment ops take torchvision's
/// `_apply_op` magnitude (`Brightness(m)` is `adjust_brightness(1 + m)`,
/// `ShearX(m)` shears by `atan(m)`, `TranslateX(m)` moves `int(m)` pixels,
/// `Rotate(m)` turns `m` degrees counter-clockwise, `Posterize(m)` keeps
/// `int(m)` bits, `Solarize(m)` inverts values `>= m`); the `Adjust*` ops
/// take `adjust_*`'s factor. Geometric ops use nearest interpolation and
/// fill 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// The image unchanged.
    Identity,
    /// Horizontal shear by `atan(m)` about the top-left corner.
    ShearX(f64),
    /// Vertical shear by `atan(m)` about the top-left corner.
    ShearY(f64),
    /// Move right by `int(m)` pixels.
    TranslateX(f64),
    /// Move down by `int(m)` pixels.
    TranslateY(f64),
    /// Turn `m` degrees counter-clockwise about the centre.
    Rotate(f64),
    /// `adjust_brightness(1 + m)`.
    Brightness(f64),
    /// `adjust_saturation(1 + m)`.
    Color(f64),
    /// `adjust_contrast(1 + m)`.
    Contrast(f64),
    /// `adjust_sharpness(1 + m)`.
    Sharpness(f64),
    /// `posterize(int(m))`: keep `int(m)` bits.
    Posterize(f64),
    /// `solarize(m)`: invert values `>= m`.
    Solarize(f64),
    /// `autocontrast`: stretch each channel to 0..=255.
    AutoContrast,
    /// `equalize`: each channel's histogram equalised.
    Equalize,
    /// `adjust_brightness(f)`.
    AdjustBrightness(f64),
    /// `adjust_contrast(f)`.
    AdjustContrast(f64),
    /// `adjust_saturation(f)`.
    AdjustSaturation(f64),
    /// `adjust_hue(f)`, `f` in [-0.5, 0.5].
    AdjustHue(f64),
}

/// The names [`Op::parse`] takes, in the order of torchvision's
/// augmentation space (the first 14), then the `adjust_*` functions.
pub const OP_NAMES: [&str; 18] = [
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_saturation",
    "adjust_hue",
];

impl Op {
    /// The op named `name` (one of [`OP_NAMES`]) with parameter `value`.
    ///
    /// # Errors
    /// [`PipelineError::InvalidConfig`] for an unknown name or a value the
    /// op does not take (not finite; a negative factor; a hue outside
    /// [-0.5, 0.5]; posterize bits outside 0..=8).
    pub fn parse(name: &str, value: f64) -> Result<Op, PipelineError> {
        let bad = |m: String| Err(PipelineError::InvalidConfig(m));
        if !value.is_finite() {
            return bad(format!("{name}: the parameter must be finite, not {value}"));
        }
        let factor = |make: fn(f64) -> Op| {
            if value >= 0.0 {
                Ok(make(value))
            } else {
                bad(format!("{name}: the factor must be >= 0, not {value}"))
            }
        };
        match name {
            "Identity" => Ok(Op::Identity),
            "ShearX" => Ok(Op::ShearX(value)),
            "ShearY" => Ok(Op::ShearY(value)),
            "TranslateX" => Ok(Op::TranslateX(value)),
            "TranslateY" => Ok(Op::TranslateY(value)),
            "Rotate" => Ok(Op::Rotate(value)),
            "Brightness" => Ok(Op::Brightness(value)),
            "Color" => Ok(Op::Color(value)),
            "Contrast" => Ok(Op::Contrast(value)),
            "Sharpness" => Ok(Op::Sharpness(value)),
            "Posterize" if (0.0..9.0).contains(&value) => Ok(Op::Posterize(value)),
            "Posterize" => bad(format!("Posterize keeps 0 to 8 bits, not {value}")),
            "Solarize" => Ok(Op::Solarize(value)),
            "AutoContrast" => Ok(Op::AutoContrast),
            "Equalize" => Ok(Op::Equalize),
            "adjust_brightness" => factor(Op::AdjustBrightness),
            "adjust_contrast" => factor(Op::AdjustContrast),
            "adjust_saturation" => factor(Op::AdjustSaturation),
            "adjust_hue" if (-0.5..=0.5).contains(&value) => Ok(Op::AdjustHue(value)),
            "adjust_hue" => bad(format!(
                "adjust_hue: the factor must be in [-0.5, 0.5], not {value}"
            )),
            other => bad(format!(
                "unknown op {other:?}; the ops are {}",
                OP_NAMES.join(", ")
            )),
        }
    }

    /// torchvision's name of the op (one of [`OP_NAMES`]).
    pub fn name(&self) -> &'static str {
        OP_NAMES[self.index()]
    }

    /// The op's parameter (0 for those without one).
    pub fn value(&self) -> f64 {
        match *self {
            Op::Identity | Op::AutoContrast | Op::Equalize => 0.0,
            Op::ShearX(v) | Op::ShearY(v) | Op::TranslateX(v) | Op::TranslateY(v) => v,
            Op::Rotate(v) | Op::Brightness(v) | Op::Color(v) | Op::Contrast(v) => v,
            Op::Sharpness(v) | Op::Posterize(v) | Op::Solarize(v) => v,
            Op::AdjustBrightness(v) | Op::AdjustContrast(v) => v,
            Op::AdjustSaturation(v) | Op::AdjustHue(v) => v,
        }
    }

    /// The position of the op's name in [`OP_NAMES`].
    pub fn index(&self) -> usize {
        match self {
            Op::Identity => 0,
            Op::ShearX(_) => 1,
            Op::ShearY(_) => 2,
            Op::TranslateX(_) => 3,
            Op::TranslateY(_) => 4,
            Op::Rotate(_) => 5,
            Op::Brightness(_) => 6,
            Op::Color(_) => 7,
            Op::Contrast(_) => 8,
            Op::Sharpness(_) => 9,
            Op::Posterize(_) => 10,
            Op::Solarize(_) => 11,
            Op::AutoContrast => 12,
            Op::Equalize => 13,
            Op::AdjustBrightness(_) => 14,
            Op::AdjustContrast(_) => 15,
            Op::AdjustSaturation(_) => 16,
            Op::AdjustHue(_) => 17,
        }
    }

    /// Applies the op to `image`, RGB8 HWC of `width` x `height`, in place
    /// (`scratch` is reused working memory).
    pub(crate) fn apply(
        &self,
        image: &mut [u8],
        width: usize,
        height: usize,
        scratch: &mut Vec<u8>,
    ) {
        let half = |n: usize| -(n as f64) * 0.5; // F.affine's centre=[0, 0]
        let shear = |deg: [f64; 2]| Affine {
            center: [half(width), half(height)],
            shear: deg,
            ..Affine::IDENTITY
        };
        let affine = match *self {
            Op::ShearX(m) => shear([m.atan().to_degrees(), 0.0]),
            Op::ShearY(m) => shear([0.0, m.atan().to_degrees()]),
            Op::TranslateX(m) => Affine {
                translate: [m.trunc(), 0.0],
                ..Affine::IDENTITY
            },
            Op::TranslateY(m) => Affine {
                translate: [0.0, m.trunc()],
                ..Affine::IDENTITY
            },
            Op::Rotate(m) => Affine {
                angle: -m, // F.rotate's "incoherence" with F.affine
                ..Affine::IDENTITY
            },
            Op::Identity => return,
            Op::Brightness(m) => return colour::brightness(image, 1.0 + m),
            Op::Color(m) => return colour::saturation(image, 1.0 + m),
            Op::Contrast(m) => return colour::contrast(image, 1.0 + m),
            Op::Sharpness(m) => return tone::sharpness(image, width, height, 1.0 + m, scratch),
            Op::Posterize(m) => return tone::posterize(image, m.clamp(0.0, 8.0) as u8),
            Op::Solarize(m) => return tone::solarize(image, m),
            Op::AutoContrast => return tone::autocontrast(image),
            Op::Equalize => return tone::equalize(image),
            Op::AdjustBrightness(f) => return colour::brightness(image, f),
            Op::AdjustContrast(f) => return colour::contrast(image, f),
            Op::AdjustSaturation(f) => return colour::saturation(image, f),
            Op::AdjustHue(f) => return hue::hue(image, f),
        };
        scratch.clear();
        scratch.extend_from_slice(image);
        geometry::warp(scratch, image, width, height, &affine);
    }
}

/// Applies `op` to one RGB8 HWC image of `width` x `height` in place: the
/// deterministic entry point (torchvision's `_apply_op` / `adjust_*` with
/// the same parameter), for tests and callers with their own draws.
///
/// # Errors
/// [`PipelineError::BufferTooSmall`] unless `image` holds exactly
/// `width * height * 3` bytes.
pub fn apply_op(op: &Op, image: &mut [u8], width: u32, height: u32) -> Result<(), PipelineError> {
    let (w, h) = (width as usize, height as usize);
    let needed = w.saturating_mul(h).saturating_mul(3);
    if image.len() != needed {
        return Err(PipelineError::BufferTooSmall {
            what: "image",
            needed,
            got: image.len(),
        });
    }
    op.apply(image, w, h, &mut Vec::new());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_values_are_refused() {
        for name in OP_NAMES {
            let op = Op::parse(name, 0.25).unwrap();
            assert_eq!(op.name(), name);
        }
        for (name, value) in [
            ("Blur", 1.0),
            ("Posterize", 9.0),
            ("Posterize", -1.0),
            ("adjust_hue", 0.6),
            ("adjust_brightness", -0.1),
            ("Rotate", f64::NAN),
        ] {
            let e = Op::parse(name, value).unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
        }
        let e = Op::parse("Blur", 1.0).unwrap_err().to_string();
        assert!(e.contains("ShearX"), "the message lists the ops: {e}");
    }

    #[test]
    fn zero_magnitudes_are_identities() {
        let img: Vec<u8> = (0..12 * 10 * 3).map(|i| (i * 37 % 256) as u8).collect();
        for op in [
            Op::Identity,
            Op::ShearX(0.0),
            Op::ShearY(0.0),
            Op::TranslateX(0.7), // int(0.7) = 0
            Op::Rotate(0.0),
            Op::Brightness(0.0),
            Op::Color(0.0),
            Op::Contrast(0.0),
            Op::Sharpness(0.0),
            Op::Posterize(8.0),
            Op::Solarize(256.0),
        ] {
            let mut x = img.clone();
            apply_op(&op, &mut x, 12, 10).unwrap();
            assert_eq!(x, img, "{op:?}");
        }
        let mut short = vec![0u8; 5];
        assert!(apply_op(&Op::Equalize, &mut short, 12, 10).is_err());
    }
}
