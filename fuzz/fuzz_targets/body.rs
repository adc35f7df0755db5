//! A whole body from the start: header parsing and verification, then the walk.
//! Arbitrary input must give a typed error or plaintext, never a panic.

#![no_main]

use std::sync::{Arc, OnceLock};

use kura_keys::secret::Kek;
use kura_keys::{BodyOpener, KeyEntry, KeyId, Keyring, Transform};
use libfuzzer_sys::fuzz_target;

fn keyring() -> Arc<Keyring> {
    static KR: OnceLock<Arc<Keyring>> = OnceLock::new();
    KR.get_or_init(|| {
        // The key of the test vectors, so their bodies seed the corpus.
        let id = KeyId(0x6b75_7261_7665_6331);
        Arc::new(Keyring::new(vec![KeyEntry::new(id, String::new(), Kek::from_bytes([0x11; 32]))], id).unwrap())
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(1, |b| usize::from(*b) + 1);
    let mut o = BodyOpener::new(keyring(), "vectors".into(), "dir/object.bin".into());
    let mut out = kura_keys::Output::new();
    for piece in data.get(1..).unwrap_or_default().chunks(split * 97) {
        if o.update(piece, &mut out).is_err() {
            return;
        }
    }
    let _ = o.finish(&mut out);
});
