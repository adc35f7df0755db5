//! Helpers shared by keys' integration tests: a keyring and whole-object sealing (the
//! plaintext comes from `kura-testkit`).

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::sync::Arc;

use kura_keys::{
    Cipher, Keyring, ObjectName, ObjectSecrets, PartInfo, PartSealer, Transform, trailer,
};

pub fn keyring() -> Keyring {
    Keyring::generate("test".into()).unwrap()
}

pub fn seal_single(kr: &Keyring, bucket: &str, key: &str, cipher: Cipher, data: &[u8]) -> Vec<u8> {
    let name = ObjectName::new(bucket, key).unwrap();
    PartSealer::single_part(kr, &name, cipher)
        .unwrap()
        .run(data)
        .unwrap()
}

/// Seals `parts` as a multipart body, sealing parts in reverse order to show they are
/// independent; appends a trailer when `with_trailer`.
pub fn seal_multipart(
    kr: &Keyring,
    bucket: &str,
    key: &str,
    cipher: Cipher,
    parts: &[(u32, &[u8])],
    with_trailer: bool,
) -> Vec<u8> {
    let name = ObjectName::new(bucket, key).unwrap();
    let secrets = ObjectSecrets::generate().unwrap();
    let pk = Arc::new(secrets.payload_key(cipher));
    let mut sealed: Vec<Vec<u8>> = parts
        .iter()
        .rev()
        .map(|(n, data)| {
            let header = (*n == parts[0].0).then(|| {
                secrets
                    .header(kr, &name, cipher, data.len() as u64)
                    .unwrap()
            });
            PartSealer::new(&pk, *n, header).unwrap().run(data).unwrap()
        })
        .collect();
    sealed.reverse();
    let mut body: Vec<u8> = sealed.concat();
    if with_trailer {
        let table: Vec<PartInfo> = parts
            .iter()
            .map(|(n, d)| PartInfo {
                number: *n,
                len: d.len() as u64,
            })
            .collect();
        let t = trailer::encode(&pk, &table, body.len() as u64).unwrap();
        body.extend_from_slice(&t);
    }
    body
}
