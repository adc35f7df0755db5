//! Extents files (repo/FORMAT.md 5.4: `thin_delta` and `thin_dump` XML, CSI records,
//! lists), which a storage tool writes and a failed run may leave half written: any
//! bytes give extents or a typed error, never a panic, and extents that parse are sorted,
//! merged, non-empty and end below 2^64.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(e) = kura_repo::Extents::read(bytes) {
        let mut end = 0u64;
        for (i, &(o, l)) in e.ranges().iter().enumerate() {
            assert!(l > 0, "an empty extent");
            assert!(i == 0 || o > end, "extents not sorted and merged: {:?}", e.ranges());
            end = o.checked_add(l).expect("an extent past 2^64");
        }
    }
});
