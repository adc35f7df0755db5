//! Size and layout arithmetic on arbitrary sizes, part sizes and ranges: no overflow, no
//! panic, and every located segment lies inside the body the size implies.

#![no_main]

use kura_keys::{Layout, SizeInfo, plaintext_size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u64, u64, u64, u64)| {
    let (ct_len, part_size, a, b) = input;
    let Ok(SizeInfo::Aligned(size)) = plaintext_size(ct_len) else { return };
    assert!(kura_keys::ciphertext_size(size).is_some_and(|c| c <= ct_len));
    let Ok(layout) = Layout::regular(size, part_size) else { return };
    if let Ok((first, start, end)) = layout.ciphertext_range(a.min(b), a.max(b)) {
        assert!(start <= end && end < ct_len, "{start}..={end} outside {ct_len}");
        assert!(first.plaintext_offset <= a.min(b));
    }
});
