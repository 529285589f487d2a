//! libFuzzer entry of the `rebatch` target; the body is [`batchcast_fuzz::rebatch`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| batchcast_fuzz::rebatch(data));
