//! Sealed user metadata (SPEC 7): the `x-amz-meta-*` pairs of an object, encrypted into one
//! metadata value under a key derived from the object's data key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;

use crate::cipher::Cipher;
use crate::format::{HEADER_SIZE, NONCE_SIZE, label};
use crate::header::ObjectSecrets;
use crate::{Error, Result};

/// The metadata name (after `x-amz-meta-`) that holds the sealed metadata.
pub const SEALED_METADATA_NAME: &str = "kura-meta";

fn encode(pairs: &[(String, String)]) -> Result<Vec<u8>> {
    let mut sorted: Vec<(String, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str()))
        .collect();
    sorted.sort();
    let mut out = Vec::new();
    let len16 = |n: usize| {
        u16::try_from(n)
            .map(u16::to_be_bytes)
            .map_err(|_| Error::Malformed("metadata too long"))
    };
    out.extend_from_slice(&len16(sorted.len())?);
    for (k, v) in &sorted {
        out.extend_from_slice(&len16(k.len())?);
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&len16(v.len())?);
        out.extend_from_slice(v.as_bytes());
    }
    Ok(out)
}

fn decode(mut b: &[u8]) -> Option<Vec<(String, String)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (h, t) = (b.get(..n)?, b.get(n..)?);
        *b = t;
        Some(h)
    }
    fn len16(b: &mut &[u8]) -> Option<usize> {
        take(b, 2).map(|h| usize::from(u16::from_be_bytes([h[0], h[1]])))
    }
    let count = len16(&mut b)?;
    let mut pairs = Vec::with_capacity(count.min(256));
    for _ in 0..count {
        let k = len16(&mut b)?;
        let k = String::from_utf8(take(&mut b, k)?.to_vec()).ok()?;
        let v = len16(&mut b)?;
        let v = String::from_utf8(take(&mut b, v)?.to_vec()).ok()?;
        pairs.push((k, v));
    }
    b.is_empty().then_some(pairs)
}

/// The associated data of sealed metadata: the label, then the 164 bytes of the object's
/// header copy (`kura-key`), which are bound to the bucket and key by their wrap and to the
/// data key by `COMMITMENT` (SPEC 7). A copy keeps the data key but gets its own header
/// copy, so the metadata of one object never opens on another, its copies included.
fn associated_data(header: &[u8; HEADER_SIZE]) -> Vec<u8> {
    let mut ad = Vec::with_capacity(label::METADATA.len() + HEADER_SIZE);
    ad.extend_from_slice(label::METADATA);
    ad.extend_from_slice(header);
    ad
}

impl ObjectSecrets {
    /// Seals user metadata pairs into the value of `x-amz-meta-kura-meta`, bound to
    /// `header`, the header copy stored beside it as `x-amz-meta-kura-key`.
    ///
    /// # Errors
    /// `Malformed` for a name or value over 65535 bytes, `Random` if the generator fails.
    pub fn seal_metadata(
        &self,
        cipher: Cipher,
        header: &[u8; HEADER_SIZE],
        pairs: &[(String, String)],
    ) -> Result<String> {
        let mut nonce = [0u8; NONCE_SIZE];
        crate::rand::fill(&mut nonce)?;
        self.seal_metadata_with_nonce(cipher, header, pairs, nonce)
    }

    /// [`ObjectSecrets::seal_metadata`] with a given nonce: for the test vectors only,
    /// which must come out the same every time.
    ///
    /// # Errors
    /// As [`ObjectSecrets::seal_metadata`].
    #[cfg(feature = "vectors")]
    #[doc(hidden)]
    pub fn seal_metadata_for_vectors(
        &self,
        cipher: Cipher,
        header: &[u8; HEADER_SIZE],
        pairs: &[(String, String)],
        nonce: [u8; NONCE_SIZE],
    ) -> Result<String> {
        self.seal_metadata_with_nonce(cipher, header, pairs, nonce)
    }

    fn seal_metadata_with_nonce(
        &self,
        cipher: Cipher,
        header: &[u8; HEADER_SIZE],
        pairs: &[(String, String)],
        nonce: [u8; NONCE_SIZE],
    ) -> Result<String> {
        let mut buf = nonce.to_vec();
        buf.extend_from_slice(&encode(pairs)?);
        self.metadata_key(cipher).seal_append(
            nonce,
            &associated_data(header),
            &mut buf,
            NONCE_SIZE,
        );
        Ok(B64.encode(buf))
    }

    /// Opens a value written by [`ObjectSecrets::seal_metadata`] for the same object and
    /// the same header copy.
    ///
    /// # Errors
    /// [`Error::TamperedHeader`] when it does not open (altered, from another object or
    /// another header copy, or sealed before metadata was bound to its header copy).
    pub fn open_metadata(
        &self,
        cipher: Cipher,
        header: &[u8; HEADER_SIZE],
        sealed: &str,
    ) -> Result<Vec<(String, String)>> {
        let mut buf = B64.decode(sealed).map_err(|_| Error::TamperedHeader)?;
        if buf.len() < NONCE_SIZE {
            return Err(Error::TamperedHeader);
        }
        let nonce: [u8; NONCE_SIZE] = crate::be::array_at(&buf, 0);
        let plain = self
            .metadata_key(cipher)
            .open(nonce, &associated_data(header), &mut buf[NONCE_SIZE..])
            .map_err(|_| Error::TamperedHeader)?;
        decode(plain).ok_or(Error::TamperedHeader)
    }
}
