//! The segment walk and the trailer parser behind a header that already verified: the
//! fuzzer cannot forge tags, but it drives every prefix, length and trailer framing check.

#![no_main]

use std::sync::Arc;

use kura_keys::{BodyOpener, Cipher, ObjectSecrets, PartInfo, PartSealer, Transform, trailer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secrets = ObjectSecrets::from_bytes(&[7; 64]);
    let key = secrets.payload_key(Cipher::Aes256Gcm);
    let mut o = BodyOpener::after_header(key);
    let mut out = kura_keys::Output::new();
    if o.update(data, &mut out).is_ok() {
        let _ = o.finish(&mut out);
    }
    // Splice fuzz bytes after an authentic part, so the walk gets past the first segment.
    let key = Arc::new(secrets.payload_key(Cipher::Aes256Gcm));
    let mut body = PartSealer::new(&key, 1, None).unwrap().run(&data[..data.len().min(300)]).unwrap();
    body.extend_from_slice(data);
    let mut o = BodyOpener::after_header(secrets.payload_key(Cipher::Aes256Gcm));
    if o.update(&body, &mut out).is_ok() {
        let _ = o.finish(&mut out);
    }
    let _ = trailer::decode(&key, data, 164 + data.len() as u64);
    if let Some(last8) = data.last_chunk::<8>() {
        let _ = trailer::trailer_len(last8, data.len() as u64);
    }
    let parts: Vec<PartInfo> = data
        .chunks_exact(12)
        .map(|c| PartInfo {
            number: u32::from_be_bytes(c[..4].try_into().unwrap()),
            len: u64::from_be_bytes(c[4..].try_into().unwrap()) >> 20,
        })
        .collect();
    if let Ok(layout) = kura_keys::Layout::table(&parts) {
        let body_len = layout.body_len_without_trailer();
        let t = trailer::encode(&key, &parts, body_len).unwrap();
        let back = trailer::decode(&key, &t, body_len + t.len() as u64).unwrap();
        assert_eq!(back.table_parts().unwrap(), parts);
    }
});
