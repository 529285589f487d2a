//! `batchcast runs plot`: one metric of several runs, as a chart for a
//! paper: SVG drawn with the plotters crate (its text needs no font file),
//! or PNG rendered from that SVG; both behind the `plot` feature. The
//! axes ([`XAxis`], [`unit_label`]) are the store's, shared with the
//! dashboard's charts, and always here.
//!
//! Runs line up on elapsed time since each run started (or on the step);
//! the legend names each run `workload/name (#id)`.

pub use batchcast_store::{unit_label, XAxis};

#[cfg(feature = "plot")]
mod draw;
#[cfg(feature = "plot")]
mod png;

#[cfg(feature = "plot")]
pub use draw::{plot, Format};
