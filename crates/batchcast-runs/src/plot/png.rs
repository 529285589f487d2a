//! PNG charts: the SVG rendered by resvg, with the machine's own fonts.
//!
//! PNG text needs a font file, and the repository carries none: resvg's
//! font database loads the system's fonts at run time (fontconfig's
//! directories), and the chart's `sans-serif` is mapped to the first of a
//! few common families found there. With no font at all the export is
//! refused, since a chart without its labels is no chart for a paper.

use resvg::{tiny_skia, usvg};

use crate::{Result, StoreError};

/// Pixels per SVG unit: twice the size, sharp in print.
const SCALE: f32 = 2.0;

/// Families tried, in order, for the chart's `sans-serif`.
const SANS: [&str; 6] = [
    "DejaVu Sans",
    "Liberation Sans",
    "Noto Sans",
    "Arial",
    "Helvetica",
    "FreeSans",
];

fn err(what: impl std::fmt::Display) -> StoreError {
    StoreError::Export(format!("cannot render the PNG: {what}"))
}

/// The PNG bytes of `svg`.
pub(super) fn render(svg: &str) -> Result<Vec<u8>> {
    let mut options = usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    let families: Vec<String> = fonts
        .faces()
        .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
        .collect();
    let Some(sans) = SANS
        .iter()
        .map(|s| s.to_string())
        .find(|s| families.contains(s))
        .or_else(|| families.first().cloned())
    else {
        return Err(err(
            "no font is installed (PNG text needs one); install one, such as Debian's \
             fonts-dejavu-core, or write the chart as .svg",
        ));
    };
    fonts.set_sans_serif_family(sans);
    let tree = usvg::Tree::from_str(svg, &options).map_err(err)?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(SCALE)
        .ok_or_else(|| err("too large"))?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| err("cannot allocate the image"))?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(SCALE, SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(err)
}
