//! Integration tests of batchcast-pipeline, in one test binary: decoding,
//! transform geometry, datasets and sampling, and bad input.

mod augment;
mod bad_input;
mod common;
mod dataset;
mod decode;
mod forge;
mod limits;
mod transforms;
