//! libFuzzer entry of target `wire` (see softverbs_fuzz::wire).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| softverbs_fuzz::wire::run(data));
