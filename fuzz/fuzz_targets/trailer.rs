//! A trailer and its part table (SPEC 5.3), as a reader finds them at the end of a body of
//! any length: a layout or a typed error, never a panic.

#![no_main]

use kura_keys::{Cipher, ObjectSecrets, trailer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u64, [u8; 8], &[u8])| {
    let (body_len, last8, bytes) = input;
    let _ = trailer::trailer_len(&last8, body_len);
    let key = ObjectSecrets::from_bytes(&[7u8; 64]).payload_key(Cipher::Aes256Gcm);
    let _ = trailer::decode(&key, bytes, body_len);
});
