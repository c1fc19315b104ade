//! libFuzzer entry of target `verbs` (see softverbs_fuzz::verbs).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| softverbs_fuzz::verbs::run(data));
