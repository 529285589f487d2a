//! [`OutputFormat`]: how a transformed image is laid out in the caller's
//! buffer, and the writer that puts it there.
//!
//! `F32Normalized` computes `(x / 255 - mean) / std` in `f32`, in that order,
//! which is what `ToTensor()` + `Normalize(mean, std)` compute, so values are
//! bit-identical to torchvision's for the same pixels. `f32` values are stored
//! in native byte order; a row of a batch starts `image_bytes` after the
//! previous one, with no padding.

use crate::writer::Writer;
use crate::PipelineError;

/// Order of the axes of one image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Height, width, channel (`[H, W, 3]`): what images are on disk.
    Nhwc,
    /// Channel, height, width (`[3, H, W]`): what torchvision models take.
    Nchw,
}

/// Element type and scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DType {
    /// The 8-bit pixel values, unscaled.
    U8,
    /// `f32` `(x / 255 - mean[c]) / std[c]`, as `ToTensor` + `Normalize`.
    F32Normalized {
        /// Per-channel mean (R, G, B), subtracted after scaling to `[0, 1]`.
        mean: [f32; 3],
        /// Per-channel standard deviation (R, G, B), divided by last.
        std: [f32; 3],
    },
}

impl DType {
    /// ImageNet channel means, as in the torchvision references.
    pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
    /// ImageNet channel standard deviations.
    pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

    /// `F32Normalized` with the ImageNet mean and std.
    pub fn imagenet() -> DType {
        DType::F32Normalized {
            mean: Self::IMAGENET_MEAN,
            std: Self::IMAGENET_STD,
        }
    }

    /// `F32Normalized` with mean 0 and std 1: exactly `ToTensor()`.
    pub fn to_tensor() -> DType {
        DType::F32Normalized {
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F32Normalized { .. } => 4,
        }
    }
}

/// Layout and element type of each output image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputFormat {
    /// Axis order.
    pub layout: Layout,
    /// Element type.
    pub dtype: DType,
}

impl Default for OutputFormat {
    /// NCHW `f32` normalised with the ImageNet mean and std: what
    /// `ToTensor()` + `Normalize(IMAGENET_MEAN, IMAGENET_STD)` give.
    fn default() -> Self {
        OutputFormat {
            layout: Layout::Nchw,
            dtype: DType::imagenet(),
        }
    }
}

impl OutputFormat {
    /// Raw pixels, `[H, W, 3]` `u8`: the most compact (4x smaller than `f32`);
    /// normalise on the GPU.
    pub fn u8_nhwc() -> OutputFormat {
        OutputFormat {
            layout: Layout::Nhwc,
            dtype: DType::U8,
        }
    }

    /// Shape of one image of `height` x `width`, in this layout.
    pub fn shape(&self, height: u32, width: u32) -> [usize; 3] {
        let (h, w) = (height as usize, width as usize);
        match self.layout {
            Layout::Nhwc => [h, w, 3],
            Layout::Nchw => [3, h, w],
        }
    }

    /// Bytes taken by one image of `height` x `width`.
    pub fn image_bytes(&self, height: u32, width: u32) -> usize {
        height as usize * width as usize * 3 * self.dtype.element_size()
    }

    /// Checks the normalisation constants.
    ///
    /// # Errors
    /// A zero or non-finite std, or a non-finite mean.
    pub fn validate(&self) -> Result<(), PipelineError> {
        if let DType::F32Normalized { mean, std } = self.dtype {
            if mean.iter().any(|m| !m.is_finite())
                || std.iter().any(|s| !s.is_finite() || *s == 0.0)
            {
                return Err(PipelineError::InvalidConfig(format!(
                    "normalisation mean {mean:?} / std {std:?}: all must be finite and std \
                     non-zero"
                )));
            }
        }
        Ok(())
    }

    /// Whether an RGB8 HWC image can be produced directly in the output
    /// buffer (no conversion pass).
    pub(crate) fn is_raw(&self) -> bool {
        self.layout == Layout::Nhwc && self.dtype == DType::U8
    }

    pub(crate) fn writer(&self) -> Writer {
        let lut = match self.dtype {
            DType::U8 => None,
            DType::F32Normalized { mean, std } => Some(std::array::from_fn(|c| {
                std::array::from_fn(|v| (v as f32 / 255.0 - mean[c]) / std[c])
            })),
        };
        Writer::new(self.layout, lut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    #[test]
    fn nchw_is_the_transpose_of_nhwc() {
        let src: Vec<u8> = (0..2 * 3 * 3).map(|v| v as u8).collect(); // 2x3 image
        let mut nchw = vec![0u8; src.len()];
        OutputFormat {
            layout: Layout::Nchw,
            dtype: DType::U8,
        }
        .writer()
        .write(&src, 3, false, &mut nchw);
        for p in 0..6 {
            for c in 0..3 {
                assert_eq!(nchw[c * 6 + p], src[p * 3 + c]);
            }
        }
    }

    #[test]
    fn normalisation_matches_to_tensor_then_normalize() {
        let src = [0u8, 128, 255];
        let fmt = OutputFormat {
            layout: Layout::Nhwc,
            dtype: DType::imagenet(),
        };
        let mut dst = vec![0u8; fmt.image_bytes(1, 1)];
        fmt.writer().write(&src, 1, false, &mut dst);
        let got = f32s(&dst);
        let expect = [
            (0.0f32 / 255.0 - 0.485) / 0.229,
            (128.0f32 / 255.0 - 0.456) / 0.224,
            (255.0f32 / 255.0 - 0.406) / 0.225,
        ];
        assert_eq!(got, expect);
        assert!((got[0] + 2.117_904).abs() < 1e-6);
    }

    #[test]
    fn sizes_and_shapes() {
        let f = OutputFormat::default();
        assert_eq!(f.image_bytes(224, 224), 224 * 224 * 3 * 4);
        assert_eq!(f.shape(2, 5), [3, 2, 5]);
        assert_eq!(OutputFormat::u8_nhwc().shape(2, 5), [2, 5, 3]);
        let bad = OutputFormat {
            layout: Layout::Nchw,
            dtype: DType::F32Normalized {
                mean: [0.0; 3],
                std: [1.0, 0.0, 1.0],
            },
        };
        assert!(bad.validate().is_err());
    }
}
