//! Writing a body: a part's segments, in a push style that bounds memory to one segment.

use std::sync::Arc;

use crate::Output;
use crate::cipher::AeadKey;
use crate::format::{HEADER_SIZE, SEGMENT_SIZE};
use crate::header::PayloadKey;
use crate::segment::{PartNonce, SegmentId, seal_into};
use crate::transform::Transform;
use crate::{Error, Result};

/// Seals the plaintext of one part into its segments (SPEC 5.2), optionally preceded by
/// the object header (part 1 writes it).
///
/// Feed it with [`Transform::update`] and end with [`Transform::finish`]; it holds back at
/// most one segment of plaintext, because a segment is sealed only once it is known
/// whether it is the part's last.
pub struct PartSealer {
    key: AeadKey,
    nonce: PartNonce,
    part: u32,
    index: u64,
    pending: Vec<u8>,
    header: Option<[u8; HEADER_SIZE]>,
    written: u64,
}

impl PartSealer {
    /// A sealer for one upload of part `part`, with a fresh random part nonce; `header`
    /// is emitted first when given.
    ///
    /// # Errors
    /// [`Error::Malformed`] for a part number outside 1..=10000, [`Error::Random`] if the
    /// system generator fails.
    pub fn new(
        key: &Arc<PayloadKey>,
        part: u32,
        header: Option<[u8; HEADER_SIZE]>,
    ) -> Result<Self> {
        let mut nonce = PartNonce::default();
        crate::rand::fill(&mut nonce)?;
        Self::with_part_nonce(key, part, header, nonce)
    }

    /// [`PartSealer::new`] with a chosen part nonce, for reproducible test vectors only.
    /// Reusing a part nonce for other data under the same key breaks the AEAD.
    ///
    /// # Errors
    /// As [`PartSealer::new`].
    #[cfg(feature = "vectors")]
    #[doc(hidden)]
    pub fn for_vectors(
        key: &Arc<PayloadKey>,
        part: u32,
        header: Option<[u8; HEADER_SIZE]>,
        nonce: PartNonce,
    ) -> Result<Self> {
        Self::with_part_nonce(key, part, header, nonce)
    }

    fn with_part_nonce(
        key: &Arc<PayloadKey>,
        part: u32,
        header: Option<[u8; HEADER_SIZE]>,
        nonce: PartNonce,
    ) -> Result<Self> {
        if part == 0 || part > crate::format::MAX_PART_NUMBER {
            return Err(Error::Malformed("part number out of range"));
        }
        Ok(Self {
            key: key.part_key(part, nonce),
            nonce,
            part,
            index: 0,
            pending: Vec::with_capacity(SEGMENT_SIZE),
            header,
            written: 0,
        })
    }

    /// A sealer for a whole single-part object: fresh secrets, the header bound to `name`
    /// under the keyring's active key, then part 1.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn single_part(
        keyring: &crate::Keyring,
        name: &crate::ObjectName<'_>,
        cipher: crate::Cipher,
    ) -> Result<Self> {
        let secrets = crate::ObjectSecrets::generate()?;
        let header = secrets.header(keyring, name, cipher, 0)?;
        Self::new(&Arc::new(secrets.payload_key(cipher)), 1, Some(header))
    }

    /// Plaintext bytes taken so far.
    #[must_use]
    pub fn plaintext_len(&self) -> u64 {
        self.written
    }

    fn emit(&mut self, from_input: Option<&[u8]>, last: bool, out: &mut Output) {
        let id = SegmentId {
            part: self.part,
            index: self.index,
            last,
        };
        if let Some(plaintext) = from_input {
            seal_into(&self.key, id, self.nonce, plaintext, out);
        } else {
            seal_into(&self.key, id, self.nonce, &self.pending, out);
            self.pending.clear();
        }
        self.index += 1;
    }

    fn take_header(&mut self, out: &mut Output) {
        if let Some(h) = self.header.take() {
            out.extend_from_slice(&h);
        }
    }
}

impl Transform for PartSealer {
    fn update(&mut self, mut input: &[u8], out: &mut Output) -> Result<()> {
        self.take_header(out);
        self.written += input.len() as u64;
        while !input.is_empty() {
            if self.pending.len() == SEGMENT_SIZE {
                // More data follows, so the held segment is not the last.
                self.emit(None, false, out);
            }
            if self.pending.is_empty() && input.len() > SEGMENT_SIZE {
                // Seal straight from the input: saves a copy on large writes.
                let (seg, rest) = input.split_at(SEGMENT_SIZE);
                self.emit(Some(seg), false, out);
                input = rest;
                continue;
            }
            let take = (SEGMENT_SIZE - self.pending.len()).min(input.len());
            self.pending.extend_from_slice(&input[..take]);
            input = &input[take..];
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.take_header(out);
        self.emit(None, true, out);
        Ok(())
    }
}
