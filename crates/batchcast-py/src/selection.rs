//! `_native.Selection`: the producer-side selection of `batchcast serve
//! --select` for a Python map-style dataset (`batchcast.SelectSampler`).
//!
//! The spec is parsed and every epoch's samples are drawn by the pipeline's
//! [`Selection`]; their order is the pipeline's [`Sampler`] order over the
//! selected samples, so a seed selects and orders the same samples as the
//! CLI does over a dataset with the same labels.

use batchcast_pipeline::{Sampler, SelectSpec, Selection};
use pyo3::prelude::*;

use crate::errors::{invalid, Exc};
use crate::serve::pipeline_to_py;

/// The most samples a dataset of unknown labels may have (`n=`).
const MAX_SAMPLES: usize = 1 << 32;

/// A selection over a dataset of `n` samples (or of known labels).
#[pyclass(module = "batchcast._native", name = "Selection", frozen)]
pub(crate) struct PySelection {
    selection: Selection,
    sampler: Sampler,
    len: usize,
}

#[pymethods]
impl PySelection {
    /// `spec` in the forms of `batchcast serve --select`; `labels` (one per
    /// sample, needed by label-balanced) or `n` samples; `shuffle`: the
    /// order of the selected samples is drawn from (seed, epoch); `scores`
    /// (one per sample) for `scores=-,keep=P` instead of a file.
    #[new]
    #[pyo3(signature = (spec, *, labels=None, n=None, seed=0, shuffle=true, scores=None))]
    fn new(
        py: Python<'_>,
        spec: &str,
        labels: Option<Vec<i64>>,
        n: Option<usize>,
        seed: u64,
        shuffle: bool,
        scores: Option<Vec<f64>>,
    ) -> PyResult<Self> {
        let parsed: SelectSpec = spec
            .parse()
            .map_err(|e: batchcast_pipeline::PipelineError| {
                let msg = e.to_string();
                pipeline_to_py(py, &e, msg)
            })?;
        if matches!(parsed, SelectSpec::NewData | SelectSpec::Freshness { .. }) {
            return Err(invalid(
                py,
                format!(
                    "--select {spec:?} needs each sample's arrival, which a map-style dataset does \
                     not have; serve a growing folder with batchcast.serve.serve_folder(select=...) \
                     (or `batchcast serve --watch --select`)"
                ),
            ));
        }
        let labels = labels_of(py, spec, &parsed, labels, n)?;
        let len = labels.len();
        check_scores(py, spec, &parsed, scores.as_deref(), len)?;
        let selection = py
            .detach(|| match &scores {
                Some(scores) => Selection::with_scores(&parsed, scores, seed),
                None => Selection::new(&parsed, &labels, seed),
            })
            .map_err(|e| {
                let msg = e.to_string();
                pipeline_to_py(py, &e, msg)
            })?;
        // Batches of one: only the order is used, never the batch cut.
        let sampler = Sampler::new(selection.count(), 1)
            .map_err(|e| invalid(py, e.to_string()))?
            .with_seed(seed)
            .with_shuffle(shuffle);
        Ok(PySelection {
            selection,
            sampler,
            len,
        })
    }

    /// Samples each epoch selects.
    #[getter]
    fn count(&self) -> usize {
        self.selection.count()
    }

    /// Samples of the dataset.
    #[getter]
    fn len(&self) -> usize {
        self.len
    }

    /// True when the method defines per-sample weights (label-balanced).
    #[getter]
    fn has_weights(&self) -> bool {
        self.selection.has_weights()
    }

    /// The weight of sample `index` (1.0 where the method defines none).
    fn weight(&self, py: Python<'_>, index: usize) -> PyResult<f32> {
        if index >= self.len {
            return Err(Exc::InvalidArgument.err(
                py,
                format!(
                    "sample {index} is out of range: the dataset has {}",
                    self.len
                ),
                &[],
            ));
        }
        Ok(self.selection.weight(index))
    }

    /// Every sample's weight, in dataset order.
    fn weights(&self, py: Python<'_>) -> Vec<f32> {
        py.detach(|| (0..self.len).map(|i| self.selection.weight(i)).collect())
    }

    /// The samples `epoch` serves, in the order it serves them.
    fn order(&self, py: Python<'_>, epoch: u64) -> Vec<usize> {
        py.detach(|| {
            let selected = self.selection.indices(epoch);
            self.sampler
                .order(epoch)
                .into_iter()
                .map(|pos| selected[pos])
                .collect()
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Selection({}, {} of {} samples per epoch)",
            self.selection.spec(),
            self.selection.count(),
            self.len
        )
    }
}

/// One label per sample: `labels` as given (of length `n` when both are
/// given), or `n` unlabelled samples (-1) for a spec that needs no labels.
fn labels_of(
    py: Python<'_>,
    spec: &str,
    parsed: &SelectSpec,
    labels: Option<Vec<i64>>,
    n: Option<usize>,
) -> PyResult<Vec<i64>> {
    match (labels, n) {
        (Some(l), None) => Ok(l),
        (Some(l), Some(n)) if l.len() == n => Ok(l),
        (Some(l), Some(n)) => Err(invalid(
            py,
            format!(
                "labels has {} entries but n={n}; give one label per sample, or only n",
                l.len()
            ),
        )),
        (None, Some(n)) if n <= MAX_SAMPLES => {
            if matches!(parsed, SelectSpec::LabelBalanced { .. }) {
                return Err(invalid(
                    py,
                    format!("--select {spec:?} balances classes: pass labels=, one per sample"),
                ));
            }
            let mut unlabelled = Vec::new();
            unlabelled.try_reserve_exact(n).map_err(|_| {
                invalid(
                    py,
                    format!(
                        "n={n}: not enough memory for a selection over that many samples; \
                         give the dataset's real length"
                    ),
                )
            })?;
            unlabelled.resize(n, -1);
            Ok(unlabelled)
        }
        (None, Some(n)) => Err(invalid(
            py,
            format!("n={n} is more than the {MAX_SAMPLES} samples a selection may cover"),
        )),
        (None, None) => Err(invalid(
            py,
            "give labels= (one per sample) or n= (the dataset's length)".into(),
        )),
    }
}

/// `scores` are given exactly when the spec is `scores=-,...`, one finite
/// score per sample of the `len`.
fn check_scores(
    py: Python<'_>,
    spec: &str,
    parsed: &SelectSpec,
    scores: Option<&[f64]>,
    len: usize,
) -> PyResult<()> {
    let given = matches!(parsed, SelectSpec::Scores { file, .. } if file.as_os_str() == "-");
    let Some(scores) = scores else {
        if given {
            return Err(invalid(
                py,
                format!(
                    "--select {spec:?}: the file \"-\" means scores given in memory: pass \
                     scores= (one per sample), or name a .npy file"
                ),
            ));
        }
        return Ok(());
    };
    if !given {
        return Err(invalid(
            py,
            format!("scores= is given, so the spec must be scores=-,keep=P, not {spec:?}"),
        ));
    }
    if scores.len() != len {
        return Err(invalid(
            py,
            format!(
                "scores= has {} entries but the dataset has {len} samples; give one score \
                 per sample",
                scores.len()
            ),
        ));
    }
    if let Some(i) = scores.iter().position(|v| !v.is_finite()) {
        return Err(invalid(
            py,
            format!(
                "scores[{i}] is {}; every score must be a finite number",
                scores[i]
            ),
        ));
    }
    Ok(())
}
