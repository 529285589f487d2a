//! Trace readers.
