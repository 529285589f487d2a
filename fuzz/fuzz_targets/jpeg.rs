//! libFuzzer entry of the `jpeg` target; the body is [`batchcast_fuzz::jpeg`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| batchcast_fuzz::jpeg(data));
