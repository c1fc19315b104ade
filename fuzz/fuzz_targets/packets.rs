//! libFuzzer entry of target `packets` (see softverbs_fuzz::packets).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| softverbs_fuzz::packets::run(data));
