//! libFuzzer entry of the `wire` target; the body is [`batchcast_fuzz::wire`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| batchcast_fuzz::wire(data));
